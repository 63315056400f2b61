package engine

// Pause stops checking and writing key's objects, and keeps holding them:
// another set that declares one of them still reports a Conflict naming
// key, and writes nothing to it. Events on them sync nothing, Sync of key
// returns a Result that says Paused, and Judge denies nothing for them.
//
// It is for an owner that is changing the objects itself, as Helm does
// between marking a revision pending and marking it deployed. Forget would
// hand each object to the next set in line (see ObjectSet.Since), and that
// set would write its own declaration over the owner's changes: with
// server-side apply, the owner's next apply then conflicts with the
// engine's field manager.
//
// A paused set keeps its informers, so the owner's next Declare finds its
// types watched. The types of a paused set that prevents changes stay in
// PreventedTypes: a webhook configured from them is asked about its
// objects and allows every request, and once the set is declared again
// its rules are there at once, with no window in which they are missing.
//
// Declare ends the pause, with what it declares; Forget lets the objects
// go. Pause of a key that holds no set does nothing, and reports false:
// there is nothing to keep. A caller that started while its owner was at
// work, and so holds nothing yet, may Declare what the owner last had and
// Pause it at once.
func (e *Engine) Pause(key string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	s := e.sets[key]
	if s == nil {
		return false
	}
	s.paused = true
	// Declare marks every object dirty again; what events marked before
	// would only be checked against a declaration the owner is replacing.
	s.dirty = map[ObjectRef]int64{}
	return true
}

// activeLocked returns key's set unless it is paused: the set that checks
// and writes what it holds. It must be called with e.mu held.
func (e *Engine) activeLocked(key string) *objectSet {
	if s := e.sets[key]; s != nil && !s.paused {
		return s
	}
	return nil
}

// isPaused reports whether key's set is paused.
func (e *Engine) isPaused(key string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	s := e.sets[key]
	return s != nil && s.paused
}
