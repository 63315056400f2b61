package main

import (
	"crypto/sha256"
	"debug/buildinfo"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"runtime/debug"
	"slices"
)

// SBOM is an SPDX 2.3 document of the Go modules linked into the
// binaries, read from the build information the Go linker writes into
// each (`go version -m`): what the image runs, not what go.mod lists. The
// platforms' binaries must agree on it.
func SBOM(o Options) ([]byte, error) {
	var info *debug.BuildInfo
	for _, b := range o.Binaries {
		bi, err := buildinfo.ReadFile(b.Path)
		if err != nil {
			return nil, fmt.Errorf("reading the build information of %s: %w", b.Path, err)
		}
		if info != nil && !slices.EqualFunc(info.Deps, bi.Deps, sameModule) {
			return nil, fmt.Errorf("%s was built from other modules than %s", b.Path, o.Binaries[0].Path)
		}
		info = bi
	}
	main := spdxPackage{
		Name: info.Main.Path, SPDXID: "SPDXRef-Package-main", VersionInfo: o.Version,
		DownloadLocation: o.Source, LicenseDeclared: o.Licenses,
		ExternalRefs: []spdxRef{purl(info.Main.Path, o.Version)},
	}
	doc := spdxDocument{
		SPDXVersion: "SPDX-2.3", DataLicense: "CC0-1.0", SPDXID: "SPDXRef-DOCUMENT",
		Name:              "helm-locker-" + o.Version,
		DocumentNamespace: fmt.Sprintf("%s/sbom/%s-%s", o.Source, o.Version, o.Revision),
		CreationInfo: spdxCreationInfo{
			Created:  o.created(),
			Creators: []string{"Tool: helm-locker-hack-image", "Tool: " + info.GoVersion},
		},
		Packages: []spdxPackage{main},
		Relationships: []spdxRelationship{
			{Element: "SPDXRef-DOCUMENT", Type: "DESCRIBES", Related: main.SPDXID},
		},
	}
	for _, dep := range info.Deps {
		m := dep
		if dep.Replace != nil {
			m = dep.Replace
		}
		p := spdxPackage{
			Name: dep.Path, SPDXID: "SPDXRef-Package-" + shortHash(dep.Path), VersionInfo: m.Version,
			DownloadLocation: "NOASSERTION", LicenseDeclared: "NOASSERTION",
			ExternalRefs: []spdxRef{purl(m.Path, m.Version)},
		}
		doc.Packages = append(doc.Packages, p)
		doc.Relationships = append(doc.Relationships, spdxRelationship{Element: main.SPDXID, Type: "DEPENDS_ON", Related: p.SPDXID})
	}
	return json.MarshalIndent(doc, "", "  ")
}

func sameModule(a, b *debug.Module) bool {
	return a.Path == b.Path && a.Version == b.Version && a.Sum == b.Sum
}

func purl(path, version string) spdxRef {
	return spdxRef{Category: "PACKAGE-MANAGER", Type: "purl", Locator: "pkg:golang/" + path + "@" + version}
}

func sha256Hex(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// shortHash makes an SPDX identifier from a module path, which may hold
// characters an identifier may not.
func shortHash(s string) string { return sha256Hex([]byte(s))[:16] }

type spdxDocument struct {
	SPDXVersion       string             `json:"spdxVersion"`
	DataLicense       string             `json:"dataLicense"`
	SPDXID            string             `json:"SPDXID"`
	Name              string             `json:"name"`
	DocumentNamespace string             `json:"documentNamespace"`
	CreationInfo      spdxCreationInfo   `json:"creationInfo"`
	Packages          []spdxPackage      `json:"packages"`
	Relationships     []spdxRelationship `json:"relationships"`
}

type spdxCreationInfo struct {
	Created  string   `json:"created"`
	Creators []string `json:"creators"`
}

type spdxPackage struct {
	Name             string    `json:"name"`
	SPDXID           string    `json:"SPDXID"`
	VersionInfo      string    `json:"versionInfo"`
	DownloadLocation string    `json:"downloadLocation"`
	FilesAnalyzed    bool      `json:"filesAnalyzed"`
	LicenseDeclared  string    `json:"licenseDeclared"`
	ExternalRefs     []spdxRef `json:"externalRefs"`
}

type spdxRef struct {
	Category string `json:"referenceCategory"`
	Type     string `json:"referenceType"`
	Locator  string `json:"referenceLocator"`
}

type spdxRelationship struct {
	Element string `json:"spdxElementId"`
	Type    string `json:"relationshipType"`
	Related string `json:"relatedSpdxElement"`
}
