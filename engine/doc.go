// Package engine keeps a set of unstructured objects exactly as declared:
// it computes three-way merge patches against the live objects, recreates
// deleted ones and skips patches that would change nothing. It knows nothing
// of Helm, so other operators can import it to lock their own object sets.
package engine
