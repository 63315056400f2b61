// Package resident keeps the pages of the locker's own executable that
// it touched once, at start, out of its resident set.
//
// A Go binary's package init functions, flag parsing, client and scheme
// setup and the first cache sync touch code and tables spread all over the
// executable, and the kernel maps what is around each touch too: up to 64
// KiB a fault (fault-around), or a whole 2 MiB folio where the file
// system caches the executable in large folios. Those pages stay mapped,
// and counted in the process's RSS, for as long as it lives, although a
// locker that is only holding objects runs a small part of that code again.
// Trim unmaps them; the pages stay in the page cache, and whatever runs
// again maps its own back on the next touch.
package resident
