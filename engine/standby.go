package engine

import "slices"

// Standby is for a replica that declares key's set but leaves its syncs to
// the leader: one standing by for the leader Lease, whose caches stay warm
// so that it can take over at once. It marks as compared the set's
// objects its caches show in line, as a Sync's first check of them would.
// Their declarations then hold in the form the API server stores, so once
// the replica leads, its first check of one edited meanwhile corrects it
// at once: a first check of a mismatch otherwise dry-runs the correction
// before making it (see canonicalize), a round trip more before the
// revert, which on a busy API server is hundreds of milliseconds. As
// Sync, it is called by the one goroutine that syncs key.
func (e *Engine) Standby(key string) {
	e.mu.Lock()
	var objects lockedObjects
	if s := e.sets[key]; s != nil {
		objects = slices.Clone(s.objects)
	}
	e.mu.Unlock()
	for _, obj := range objects {
		if !obj.fresh || obj.proof != nil {
			continue
		}
		// The stub is of this declaration, so it was judged in line
		// after the declaration was made, by rules no older than those
		// the object was resolved by; if those are still the rules, it
		// was judged by them.
		if _, changes := e.schemas.rulesAt(obj.ref().GVR.GroupVersion()); changes != obj.rulesSeen {
			continue
		}
		cached, exists, synced, err := e.cached(obj.ref().GVR, obj.ref().Namespace, obj.ref().Name)
		if stub, ok := cached.(*inLineStub); ok && err == nil && exists && synced && stub.generation == obj.generation {
			obj.fresh = false
		}
	}
}
