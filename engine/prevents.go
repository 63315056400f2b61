package engine

// Prevents reports whether a set that prevents changes holds the object
// ref names. It is what an admission webhook asks first, from the
// request's resource, namespace and name alone: a request about an object
// no such set holds is allowed without decoding either of its objects.
func (e *Engine) Prevents(ref ObjectRef) bool {
	_, locked := e.prevented(ref)
	return locked != nil
}
