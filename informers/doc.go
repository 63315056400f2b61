// Package informers is a registry of dynamic informers, one per resource
// type, started when the first watched object of a type appears and stopped
// when the last one goes, following CRDs and discovery as they change.
package informers
