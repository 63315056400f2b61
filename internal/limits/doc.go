// Package limits holds no code: its test holds the locker's files and
// functions to what a reader takes in at once. A non-test file of
// internal/ or engine/ past 600 lines is the sign that a capability wants
// a room of its own; a function outside cmd/ past 80 lines wants its
// steps (observe, decide, act, report) named.
package limits
