package inputs

import (
	"errors"
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

// Chip is one package chip as checked: the package as pip will get it, or
// why it is refused.
type Chip struct {
	Chip    string `json:"chip"`
	Package string `json:"package,omitempty"` // normalized, when OK
	Error   string `json:"error,omitempty"`
}

// CheckChips checks each chip on its own and against the ones before it
// (the same package twice is refused), so a form can mark each chip.
func CheckChips(chips []string) []Chip {
	seen := map[string]bool{}
	out := make([]Chip, 0, len(chips))
	for i, c := range chips {
		res := Chip{Chip: c}
		p, err := CheckPackage(c)
		switch {
		case i >= MaxPackages:
			res.Error = fmt.Sprintf("a job may install at most %d packages", MaxPackages)
		case err != nil:
			res.Error = err.Error()
		default:
			name := strings.ToLower(pkgPattern.FindStringSubmatch(p)[1])
			name = strings.NewReplacer("_", "-", ".", "-").Replace(name)
			if seen[name] {
				res.Error = fmt.Sprintf("package %q is listed twice", name)
			} else {
				seen[name], res.Package = true, p
			}
		}
		out = append(out, res)
	}
	return out
}

// CheckPackages validates every chip, refusing duplicates, and returns
// them normalized.
func CheckPackages(chips []string) ([]string, error) {
	if len(chips) > MaxPackages {
		return nil, fmt.Errorf("%d packages is more than the %d a job may install", len(chips), MaxPackages)
	}
	var out []string
	for _, c := range CheckChips(chips) {
		if c.Error != "" {
			return nil, errors.New(c.Error)
		}
		out = append(out, c.Package)
	}
	return out, nil
}
