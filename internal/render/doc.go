// Package render renders a stored Helm release again, with Helm's own code,
// against the cluster as it is now, and says how the result differs from
// the manifest Helm stored. A lock that holds only the stored manifest
// cannot tell when the chart itself would now produce something else: a
// lookup that finds a new object, a cluster upgraded past a Capabilities
// branch. Decode reads the whole release, Render renders it as
// `helm upgrade --reuse-values` would, and Compare sets what the chart now
// renders against what Helm stored. Helm 3 and Helm 4 render and store
// some charts differently, so each step is the code, and the reading, of
// the Helm that wrote the revision (see Release).
package render
