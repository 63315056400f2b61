// Package events writes the locker's Kubernetes Events without dropping
// them under load.
//
// client-go's record.Broadcaster holds at most 1,000 events and drops the
// rest (watch.DropIfChannelFull), and writes them one at a time. A cold
// start of 2,000 releases emits about 4,000 events at once, and about
// 2,900 were lost: against a real API server, a burst of 3,000 events
// through it wrote 1,004. Here events wait in per-object order for one of
// several writers, and are dropped only past a bound of their own, each
// drop counted. client-go's EventCorrelator still folds repeats and limits
// each object's events, as the broadcaster's does.
package events
