package lock

// Phase is where a lock stands.
type Phase string

// The phases. A lock goes Unlocked → Reconciling when a declaration is
// engaged, and Reconciling → Locked once every object of it has been checked
// and is as declared; Locked → Reconciling when an object drifts and cannot
// be corrected at once. A lock that only watches (Warn) goes Reconciling →
// Watching once every object has been checked, in line or not. Any phase
// goes back to Unlocked when the lock opens: its owner (Helm) is working on
// the objects, the declaration is gone, or no one asks for the lock.
const (
	Unlocked    Phase = "Unlocked"
	Reconciling Phase = "Reconciling"
	Locked      Phase = "Locked"
	Watching    Phase = "Watching"
)

// EventType is what happened to a lock's declaration or its objects.
type EventType int

// The events that move a lock.
const (
	// Engage: hold the declaration Revision, reverting drift, or only
	// reporting it when Warn is set.
	Engage EventType = iota
	// Checked: a sync of Revision ended. Complete says every object was
	// checked; InLine that every object is as declared.
	Checked
	// Open: stop holding anything.
	Open
)

// Event is one input to the state machine.
type Event struct {
	Type     EventType
	Revision int
	// Warn, for Engage: report drift and never revert it.
	Warn bool
	// Complete and InLine, for Checked.
	Complete, InLine bool
}

// Lock is one lock's state. The zero value is Unlocked.
type Lock struct {
	Phase Phase
	// Revision is the declaration held; 0 when Unlocked.
	Revision int
	// Warn says the lock reports drift and never reverts it.
	Warn bool
}

// Holding reports whether the lock has settled: Locked, or Watching for a
// lock that only reports.
func (l Lock) Holding() bool { return l.Phase == Locked || l.Phase == Watching }

// Next returns the lock after ev. It is a pure function, so every transition
// can be tested on its own.
func (l Lock) Next(ev Event) Lock {
	if l.Phase == "" {
		l.Phase = Unlocked
	}
	switch ev.Type {
	case Open:
		return Lock{Phase: Unlocked}
	case Engage:
		if l.Phase != Unlocked && l.Revision == ev.Revision && l.Warn == ev.Warn {
			return l
		}
		return Lock{Phase: Reconciling, Revision: ev.Revision, Warn: ev.Warn}
	case Checked:
		if l.Phase == Unlocked || l.Revision != ev.Revision {
			return l
		}
		switch {
		case l.Warn && ev.Complete:
			l.Phase = Watching
		case l.Warn:
			l.Phase = Reconciling
		case ev.InLine:
			l.Phase = Locked
		default:
			l.Phase = Reconciling
		}
	}
	return l
}
