package lock

import "testing"

func TestNext(t *testing.T) {
	unlocked := Lock{Phase: Unlocked}
	checked := func(rev int, complete, inLine bool) Event {
		return Event{Type: Checked, Revision: rev, Complete: complete, InLine: inLine}
	}
	tests := []struct {
		name string
		from Lock
		ev   Event
		want Lock
	}{
		{"zero value engages", Lock{}, Event{Type: Engage, Revision: 1}, Lock{Phase: Reconciling, Revision: 1}},
		{"engage from unlocked", unlocked, Event{Type: Engage, Revision: 3}, Lock{Phase: Reconciling, Revision: 3}},
		{"in line locks", Lock{Phase: Reconciling, Revision: 3}, checked(3, true, true), Lock{Phase: Locked, Revision: 3}},
		{"a check of another revision is ignored", Lock{Phase: Reconciling, Revision: 3}, checked(2, true, true), Lock{Phase: Reconciling, Revision: 3}},
		{"a check while unlocked stays unlocked", unlocked, checked(0, true, true), unlocked},
		{"drift reconciles", Lock{Phase: Locked, Revision: 3}, checked(3, true, false), Lock{Phase: Reconciling, Revision: 3}},
		{"drift while reconciling stays", Lock{Phase: Reconciling, Revision: 3}, checked(3, false, false), Lock{Phase: Reconciling, Revision: 3}},
		{"re-engaging the locked revision keeps it locked", Lock{Phase: Locked, Revision: 3}, Event{Type: Engage, Revision: 3}, Lock{Phase: Locked, Revision: 3}},
		{"a new revision reconciles", Lock{Phase: Locked, Revision: 3}, Event{Type: Engage, Revision: 4}, Lock{Phase: Reconciling, Revision: 4}},
		{"a new revision while reconciling", Lock{Phase: Reconciling, Revision: 3}, Event{Type: Engage, Revision: 4}, Lock{Phase: Reconciling, Revision: 4}},
		{"open from locked", Lock{Phase: Locked, Revision: 3}, Event{Type: Open}, unlocked},
		{"open from reconciling", Lock{Phase: Reconciling, Revision: 3}, Event{Type: Open}, unlocked},
		{"open while unlocked", unlocked, Event{Type: Open}, unlocked},
		{"warn: a complete check watches, drifted or not", Lock{Phase: Reconciling, Revision: 3, Warn: true}, checked(3, true, false), Lock{Phase: Watching, Revision: 3, Warn: true}},
		{"warn: an incomplete check reconciles", Lock{Phase: Watching, Revision: 3, Warn: true}, checked(3, false, false), Lock{Phase: Reconciling, Revision: 3, Warn: true}},
		{"warn: never locks", Lock{Phase: Reconciling, Revision: 3, Warn: true}, checked(3, true, true), Lock{Phase: Watching, Revision: 3, Warn: true}},
		{"switching to warn re-engages", Lock{Phase: Locked, Revision: 3}, Event{Type: Engage, Revision: 3, Warn: true}, Lock{Phase: Reconciling, Revision: 3, Warn: true}},
		{"switching to enforce re-engages", Lock{Phase: Watching, Revision: 3, Warn: true}, Event{Type: Engage, Revision: 3}, Lock{Phase: Reconciling, Revision: 3}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.from.Next(tt.ev); got != tt.want {
				t.Errorf("%+v.Next(%+v) = %+v, want %+v", tt.from, tt.ev, got, tt.want)
			}
		})
	}
}

func TestHolding(t *testing.T) {
	for phase, want := range map[Phase]bool{Unlocked: false, Reconciling: false, Locked: true, Watching: true} {
		if got := (Lock{Phase: phase}).Holding(); got != want {
			t.Errorf("%s: Holding = %v, want %v", phase, got, want)
		}
	}
}
