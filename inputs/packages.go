package inputs

import (
	"fmt"
	"regexp"
	"strings"
)

// A package chip is a PEP 508 name, optional extras, and optional version
// specifiers: "numpy", "scikit-learn>=1.3", "torch==2.2.0",
// "pandas[performance]>=2,<3". Nothing else reaches pip: no URLs, paths,
// markers or options.
var (
	pkgName      = `[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?`
	pkgVersion   = `[A-Za-z0-9][A-Za-z0-9.*+!_-]*`
	pkgSpecifier = `(?:===|==|!=|~=|<=|>=|<|>)\s*` + pkgVersion
	pkgPattern   = regexp.MustCompile(`^(` + pkgName + `)(\[\s*` + pkgName + `(?:\s*,\s*` + pkgName + `)*\s*\])?\s*(` + pkgSpecifier + `(?:\s*,\s*` + pkgSpecifier + `)*)?$`)
)

// MaxPackages bounds the chips on one job.
const MaxPackages = 50

// CheckPackage validates one chip and returns it normalized (spaces removed).
func CheckPackage(chip string) (string, error) {
	s := strings.TrimSpace(chip)
	switch {
	case s == "":
		return "", fmt.Errorf("an empty package name")
	case len(s) > 200:
		return "", fmt.Errorf("package %.40q... is too long to be a package name", s)
	case strings.HasPrefix(s, "-"):
		return "", fmt.Errorf("%q is a pip option, not a package: only package names (with an optional version, like numpy>=1.26) are allowed", s)
	case strings.Contains(s, "://") || strings.Contains(s, "@"):
		return "", fmt.Errorf("%q is a URL or direct reference: only package names from the package index (like numpy>=1.26) are allowed", s)
	case strings.ContainsAny(s, `/\`) || strings.HasPrefix(s, "."):
		return "", fmt.Errorf("%q is a file path: only package names (like numpy>=1.26) are allowed", s)
	case strings.Contains(s, ";"):
		return "", fmt.Errorf("%q has an environment marker: give just the name and version", s)
	}
	if !pkgPattern.MatchString(s) {
		return "", fmt.Errorf("%q is not a package name with an optional version (for example numpy, scikit-learn>=1.3 or torch==2.2.0)", s)
	}
	return strings.Join(strings.Fields(s), ""), nil
}

// CheckPackages validates every chip, refusing duplicates.
func CheckPackages(chips []string) ([]string, error) {
	if len(chips) > MaxPackages {
		return nil, fmt.Errorf("%d packages is more than the %d a job may install", len(chips), MaxPackages)
	}
	seen := map[string]bool{}
	var out []string
	for _, c := range chips {
		p, err := CheckPackage(c)
		if err != nil {
			return nil, err
		}
		name := strings.ToLower(pkgPattern.FindStringSubmatch(p)[1])
		name = strings.NewReplacer("_", "-", ".", "-").Replace(name)
		if seen[name] {
			return nil, fmt.Errorf("package %q is listed twice", name)
		}
		seen[name] = true
		out = append(out, p)
	}
	return out, nil
}
