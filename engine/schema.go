package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/managedfields"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/openapi"
	"k8s.io/kube-openapi/pkg/validation/spec"
)

// schemas holds, per group version, the merge rules the API server
// publishes in its OpenAPI v3 document: for built-in kinds the schema of
// the API server's own version, not the one client-go was generated with,
// and for custom resources the structural schema of their CRD, with its
// x-kubernetes-list-type, list-map-keys and map-type markers. Without
// them a custom resource's lists would be held whole and its maps entry by
// entry, whatever its CRD says.
//
// Documents are fetched by Sync, before it takes the engine's lock (see
// load), and read by every check without I/O (see rules). After a CRD
// changes, each group version's document is looked up again, and read
// again only if the hash the API server publishes for it moved: a CRD's
// labels or status change often, its schema seldom.
type schemas struct {
	client openapi.ClientWithContext // nil: the compiled and deduced rules
	now    func() time.Time

	loadMu sync.Mutex // one load at a time; the documents are shared
	mu     sync.Mutex
	byGV   map[schema.GroupVersion]*gvSchema
	// changes counts, per group version, the times its rules changed:
	// loaded in place of the fallback, or read anew from a document
	// whose hash moved.
	changes map[schema.GroupVersion]uint32
}

// gvSchema is one group version's rules, or why they are missing.
type gvSchema struct {
	types managedfields.TypeConverter
	// roots caches the root type of each kind under types (see
	// mergeRules.root); it goes with types.
	roots *sync.Map
	// url is the document's address, which carries its hash, and stale
	// is set once a CRD changed: types stay in use until a load finds
	// the document, at a new url or the same.
	url   string
	stale bool
	// err is why the last load failed (types are then the fallback's, or
	// the last good document's), and retryAt when a load may try again;
	// missingSince is when the API server was first seen to publish no
	// document for the group version (a CRD's is published a moment
	// after the CRD is created).
	err          error
	retryAt      time.Time
	missingSince time.Time
}

// Retry delays of a group version whose rules could not be loaded: soon
// for a document not published yet, which follows its CRD within moments;
// rarely for a refusal or a broken document, which need a person.
const (
	unpublishedRetry = 2 * time.Second
	unpublishedFor   = time.Minute // then it is treated as a failure
	failedRetry      = 5 * time.Minute
)

func newSchemas(client openapi.ClientWithContext, now func() time.Time) *schemas {
	return &schemas{client: client, now: now, byGV: map[schema.GroupVersion]*gvSchema{}, changes: map[schema.GroupVersion]uint32{}}
}

// rules returns the merge rules of gv's kinds: those the API server
// published once they are loaded, else client-go's compiled schema for a
// built-in group version and the deduced rules for any other.
func (s *schemas) rules(gv schema.GroupVersion) mergeRules {
	r, _ := s.rulesAt(gv)
	return r
}

// known reports whether gv's rules are as load left them: read, or
// failed and falling back. Until then an object of gv is not resolved.
func (s *schemas) known(gv schema.GroupVersion) bool {
	if s.client == nil {
		return true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.byGV[gv] != nil
}

// rulesAt returns rules(gv) and the count of gv's changes they are from:
// an object checked by other rules before may be in line by these only in
// the API server's stored form (see lockedObject.rulesSeen).
func (s *schemas) rulesAt(gv schema.GroupVersion) (mergeRules, uint32) {
	s.mu.Lock()
	e, changes := s.byGV[gv], s.changes[gv]
	s.mu.Unlock()
	if e != nil && e.types != nil {
		return mergeRules{types: e.types, roots: e.roots}, changes
	}
	if scheme.Scheme.IsVersionRegistered(gv) {
		return mergeRules{types: builtinTypes(), roots: &builtinRoots}, changes
	}
	return mergeRules{types: deducedTypes, roots: &deducedRoots}, changes
}

// load fetches the documents of those of gvs not loaded yet whose retry
// time has come. It returns how soon a document the API server did not
// publish yet is worth asking for again, or 0. A group version whose
// document cannot be had keeps the rules of rules' fallback: holding an
// object by simpler rules beats not holding it.
func (s *schemas) load(ctx context.Context, gvs []schema.GroupVersion) time.Duration {
	if s.client == nil {
		return 0
	}
	if len(s.due(gvs)) == 0 {
		return s.retryIn(gvs)
	}
	s.loadMu.Lock()
	defer s.loadMu.Unlock()
	due := s.due(gvs) // another load may have done them meanwhile
	if len(due) == 0 {
		return s.retryIn(gvs)
	}
	paths, err := s.client.PathsWithContext(ctx)
	now := s.now()
	for _, gv := range due {
		old := s.entry(gv)
		doc := paths[openAPIPath(gv)]
		if err == nil && old != nil && old.types != nil && doc != nil && doc.ServerRelativeURL() == old.url {
			s.mu.Lock()
			old.stale = false // the same document
			s.mu.Unlock()
			continue
		}
		e := &gvSchema{}
		switch {
		case err != nil:
			e.err = fmt.Errorf("listing the API server's OpenAPI v3 documents: %w", err)
		case doc == nil:
			e.err = fmt.Errorf("the API server publishes no OpenAPI v3 document for %s", gv)
			e.missingSince = now
			if old != nil && !old.missingSince.IsZero() {
				e.missingSince = old.missingSince
			}
		default:
			e.url = doc.ServerRelativeURL()
			e.types, e.err = readTypes(ctx, doc)
			e.roots = new(sync.Map)
			if e.err != nil {
				e.err = fmt.Errorf("reading the OpenAPI v3 document of %s: %w", gv, e.err)
			}
		}
		e.retryAt = now.Add(failedRetry)
		if !e.missingSince.IsZero() && now.Sub(e.missingSince) < unpublishedFor {
			e.retryAt = now.Add(unpublishedRetry)
		}
		if ctx.Err() != nil && e.types == nil {
			continue // cancelled: not a verdict on the document
		}
		s.mu.Lock()
		if e.types == nil && old != nil && old.types != nil {
			// Rules in use stay until new ones can be read.
			e.types, e.url, e.roots = old.types, old.url, old.roots
		} else if e.types != nil {
			s.changes[gv]++
		}
		s.byGV[gv] = e
		s.mu.Unlock()
	}
	return s.retryIn(gvs)
}

func (s *schemas) entry(gv schema.GroupVersion) *gvSchema {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.byGV[gv]
}

// due returns those of gvs never loaded, marked stale, or whose last load
// failed and whose retry time has come.
func (s *schemas) due(gvs []schema.GroupVersion) []schema.GroupVersion {
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []schema.GroupVersion
	for _, gv := range gvs {
		if e := s.byGV[gv]; e == nil || e.stale || (e.err != nil && !now.Before(e.retryAt)) {
			out = append(out, gv)
		}
	}
	return out
}

// retryIn is how soon one of gvs whose document was not published yet is
// due again, or 0 if none is waiting for its document.
func (s *schemas) retryIn(gvs []schema.GroupVersion) time.Duration {
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	var d time.Duration
	for _, gv := range gvs {
		e := s.byGV[gv]
		if e == nil || e.types != nil || e.missingSince.IsZero() || now.Sub(e.missingSince) >= unpublishedFor {
			continue
		}
		if w := max(e.retryAt.Sub(now), time.Millisecond); d == 0 || w < d {
			d = w
		}
	}
	return d
}

// forget marks every group version's rules to be looked up again: a CRD
// changed, and with it, perhaps, its schema. They stay in use meanwhile.
func (s *schemas) forget() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, e := range s.byGV {
		e.stale = true
	}
}

// openAPIPath is where the API server publishes gv's document.
func openAPIPath(gv schema.GroupVersion) string {
	if gv.Group == "" {
		return "api/" + gv.Version
	}
	return "apis/" + gv.Group + "/" + gv.Version
}

// readTypes fetches one OpenAPI v3 document and reads its schemas, the
// rest of it (paths and operations) being of no use here.
func readTypes(ctx context.Context, doc openapi.GroupVersionWithContext) (managedfields.TypeConverter, error) {
	data, err := doc.SchemaWithContext(ctx, "application/json")
	if err != nil {
		return nil, err
	}
	var parsed struct {
		Components struct {
			Schemas map[string]*spec.Schema `json:"schemas"`
		} `json:"components"`
	}
	if err := json.Unmarshal(data, &parsed); err != nil {
		return nil, err
	}
	return managedfields.NewTypeConverter(parsed.Components.Schemas, false)
}
