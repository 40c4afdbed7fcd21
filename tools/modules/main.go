// Command modules keeps the repository's Go modules releasable: the modules listed in
// versions.yaml are released together at one version, require one another at that
// version, and carry no replace directive; go.work alone joins them for development.
//
// The released modules cannot be resolved from a module proxy before they are tagged, so
// every subcommand that needs the go command to resolve them works on a temporary copy of
// the working tree, committed and tagged at the version, which the go command reaches
// through git (GOPRIVATE and a url.insteadOf in a HOME of its own). Every other module
// comes from the usual proxy, through the local module cache first.
//
//	go run ./tools/modules check           no replace, one version everywhere, every module tidy
//	go run ./tools/modules tidy            go mod tidy in every module
//	go run ./tools/modules consumer        the README's install lines, from a fresh module outside the repository
//	go run ./tools/modules release VERSION rewrite the requirements to VERSION, tidy, print the tags to push
//	go run ./tools/modules devproxy DIR    write the development module proxy (see devProxy)
//
// Run it from the tools directory with GOWORK=off (the Makefile does): the tools module
// needs nothing but the standard library, so it builds before the workspace resolves.
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
)

// repoPath is the import path of the root module; every released module lies under it.
const repoPath = "github.com/outboxer-go/outboxer"

func main() {
	flag.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: modules check | tidy | consumer | release VERSION | devproxy DIR")
	}
	flag.Parse()
	if flag.NArg() < 1 {
		flag.Usage()
		os.Exit(2)
	}
	root, err := repoRoot()
	if err == nil {
		switch cmd := flag.Arg(0); cmd {
		case "check":
			err = check(root)
		case "tidy":
			err = tidyAll(root)
		case "consumer":
			err = consumer(root)
		case "devproxy":
			if flag.NArg() != 2 {
				flag.Usage()
				os.Exit(2)
			}
			err = devProxy(root, flag.Arg(1))
		case "release":
			if flag.NArg() != 2 || !semver.MatchString(flag.Arg(1)) {
				flag.Usage()
				os.Exit(2)
			}
			err = release(root, flag.Arg(1))
		default:
			flag.Usage()
			os.Exit(2)
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "modules:", err)
		os.Exit(1)
	}
}

var semver = regexp.MustCompile(`^v[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?$`)

// module is one module of go.work.
type module struct {
	Path     string // import path
	Dir      string // relative to the repository root, "." for the root module
	Released bool   // listed in versions.yaml
}

// tagPrefix is the prefix of the module's tags: "" for the root module, "adapters/gorm/" ...
func (m module) tagPrefix() string {
	if m.Dir == "." {
		return ""
	}
	return filepath.ToSlash(m.Dir) + "/"
}

// versions is versions.yaml: the release version and the released modules.
type versions struct {
	Version string
	Modules []string
}

func repoRoot() (string, error) {
	out, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		return "", fmt.Errorf("finding the repository root: %w", err)
	}
	return strings.TrimSpace(string(out)), nil
}

func readVersions(root string) (versions, error) {
	var v versions
	f, err := os.Open(filepath.Join(root, "versions.yaml"))
	if err != nil {
		return v, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "" || strings.HasPrefix(line, "#") || line == "modules:":
		case strings.HasPrefix(line, "version:"):
			v.Version = strings.TrimSpace(strings.TrimPrefix(line, "version:"))
		case strings.HasPrefix(line, "- "):
			v.Modules = append(v.Modules, strings.TrimSpace(strings.TrimPrefix(line, "- ")))
		default:
			return v, fmt.Errorf("versions.yaml: unexpected line %q", line)
		}
	}
	if err := sc.Err(); err != nil {
		return v, err
	}
	if !semver.MatchString(v.Version) {
		return v, fmt.Errorf("versions.yaml: version %q is not vX.Y.Z", v.Version)
	}
	return v, nil
}

// writeVersion rewrites the version line of versions.yaml.
func writeVersion(root, version string) error {
	name := filepath.Join(root, "versions.yaml")
	b, err := os.ReadFile(name)
	if err != nil {
		return err
	}
	b = regexp.MustCompile(`(?m)^version:.*$`).ReplaceAll(b, []byte("version: "+version))
	return os.WriteFile(name, b, 0o644)
}

// workspace lists the modules of go.work, marking those versions.yaml releases.
func workspace(root string, v versions) ([]module, error) {
	cmd := exec.Command("go", "work", "edit", "-json", filepath.Join(root, "go.work"))
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("reading go.work: %w", err)
	}
	var work struct {
		Use     []struct{ DiskPath string }
		Replace []struct{ Old struct{ Path string } }
	}
	if err := json.Unmarshal(out, &work); err != nil {
		return nil, err
	}
	if len(work.Replace) > 0 {
		return nil, errors.New("go.work has a replace directive; the workspace's use lines are enough")
	}
	var mods []module
	for _, u := range work.Use {
		gm, err := readGoMod(filepath.Join(root, u.DiskPath))
		if err != nil {
			return nil, err
		}
		mods = append(mods, module{Path: gm.Module.Path, Dir: filepath.Clean(u.DiskPath), Released: slices.Contains(v.Modules, gm.Module.Path)})
	}
	for _, p := range v.Modules {
		if !slices.ContainsFunc(mods, func(m module) bool { return m.Path == p }) {
			return nil, fmt.Errorf("versions.yaml lists %s, which go.work does not use", p)
		}
	}
	return mods, nil
}

type goMod struct {
	Module  struct{ Path string }
	Go      string
	Require []struct {
		Path     string
		Version  string
		Indirect bool
	}
	Replace []struct{ Old struct{ Path string } }
}

func readGoMod(dir string) (goMod, error) {
	var gm goMod
	cmd := exec.Command("go", "mod", "edit", "-json")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOWORK=off")
	out, err := cmd.Output()
	if err != nil {
		return gm, fmt.Errorf("reading %s/go.mod: %w", dir, err)
	}
	return gm, json.Unmarshal(out, &gm)
}

// check reports every module with a replace directive, a requirement on a released module
// at another version than versions.yaml's, or a go.mod or go.sum that go mod tidy changes.
func check(root string) error {
	v, err := readVersions(root)
	if err != nil {
		return err
	}
	mods, err := workspace(root, v)
	if err != nil {
		return err
	}
	var problems []string
	for _, m := range mods {
		gm, err := readGoMod(filepath.Join(root, m.Dir))
		if err != nil {
			return err
		}
		for _, r := range gm.Replace {
			problems = append(problems, fmt.Sprintf("%s/go.mod: replace %s (go.work joins the modules for development)", m.Dir, r.Old.Path))
		}
		for _, r := range gm.Require {
			i := slices.IndexFunc(mods, func(x module) bool { return x.Path == r.Path })
			if i < 0 {
				continue
			}
			if r.Version != v.Version {
				problems = append(problems, fmt.Sprintf("%s/go.mod: requires %s %s, versions.yaml says %s", m.Dir, r.Path, r.Version, v.Version))
			}
			if m.Released && !mods[i].Released {
				problems = append(problems, fmt.Sprintf("%s/go.mod: requires %s, which is never published (released modules require only released ones)", m.Dir, r.Path))
			}
		}
		if m.Released && gm.Go != "1.26" && gm.Go != "1.26.0" {
			problems = append(problems, fmt.Sprintf("%s/go.mod: go %s; released modules declare the oldest supported release, go 1.26.0", m.Dir, gm.Go))
		}
	}
	if len(problems) == 0 {
		c, err := newClone(root, v, mods, v.Version)
		if err != nil {
			return err
		}
		defer c.remove()
		for _, m := range mods {
			fmt.Printf("== tidy? %s\n", m.Dir)
			changed, err := c.tidy(m)
			if err != nil {
				return err
			}
			for _, name := range changed {
				problems = append(problems, fmt.Sprintf("%s: not tidy (run make tidy)", filepath.Join(m.Dir, name)))
			}
		}
	}
	if len(problems) > 0 {
		return errors.New(strings.Join(problems, "\n"))
	}
	fmt.Printf("modules: %d modules, %d released at %s, no replace, all tidy\n", len(mods), len(v.Modules), v.Version)
	return nil
}

// tidyAll runs go mod tidy in every module and writes the results into the working tree.
// A module's tidy reads its siblings as the clone has them, so it runs until nothing moves.
func tidyAll(root string) error {
	v, err := readVersions(root)
	if err != nil {
		return err
	}
	mods, err := workspace(root, v)
	if err != nil {
		return err
	}
	for pass := 1; pass <= 3; pass++ {
		c, err := newClone(root, v, mods, v.Version)
		if err != nil {
			return err
		}
		moved := false
		for _, m := range mods {
			changed, err := c.tidy(m)
			if err != nil {
				c.remove()
				return err
			}
			for _, name := range changed {
				fmt.Printf("tidied %s\n", filepath.Join(m.Dir, name))
				if err := copyFile(filepath.Join(c.dir, m.Dir, name), filepath.Join(root, m.Dir, name)); err != nil {
					c.remove()
					return err
				}
				moved = true
			}
		}
		c.remove()
		if !moved {
			return nil
		}
	}
	return errors.New("go mod tidy still changes files after 3 passes")
}

// release rewrites every requirement on a released module to version, records the version
// in versions.yaml, tidies every module and prints the tags to push, in dependency order.
func release(root, version string) error {
	v, err := readVersions(root)
	if err != nil {
		return err
	}
	mods, err := workspace(root, v)
	if err != nil {
		return err
	}
	for _, m := range mods {
		gm, err := readGoMod(filepath.Join(root, m.Dir))
		if err != nil {
			return err
		}
		var args []string
		for _, r := range gm.Require {
			if slices.ContainsFunc(mods, func(x module) bool { return x.Path == r.Path }) {
				args = append(args, "-require="+r.Path+"@"+version)
			}
		}
		if len(args) == 0 {
			continue
		}
		cmd := exec.Command("go", append([]string{"mod", "edit"}, args...)...)
		cmd.Dir = filepath.Join(root, m.Dir)
		cmd.Env = append(os.Environ(), "GOWORK=off")
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("%s: go mod edit: %w\n%s", m.Dir, err, out)
		}
	}
	if err := writeVersion(root, version); err != nil {
		return err
	}
	if err := tidyAll(root); err != nil {
		return err
	}
	order, err := dependencyOrder(root, mods)
	if err != nil {
		return err
	}
	fmt.Printf("# commit the changes, then tag that commit and push the tags, in this order:\n")
	for _, m := range order {
		fmt.Printf("git tag %s%s\n", m.tagPrefix(), version)
	}
	return nil
}

// dependencyOrder sorts the released modules so that each comes after every released
// module it requires.
func dependencyOrder(root string, mods []module) ([]module, error) {
	deps := map[string][]string{}
	var released []module
	for _, m := range mods {
		if !m.Released {
			continue
		}
		released = append(released, m)
		gm, err := readGoMod(filepath.Join(root, m.Dir))
		if err != nil {
			return nil, err
		}
		for _, r := range gm.Require {
			deps[m.Path] = append(deps[m.Path], r.Path)
		}
	}
	sort.Slice(released, func(i, j int) bool { return released[i].Path < released[j].Path })
	var order []module
	state := map[string]int{} // 1 visiting, 2 done
	var visit func(m module) error
	visit = func(m module) error {
		switch state[m.Path] {
		case 1:
			return fmt.Errorf("released modules require one another in a cycle through %s", m.Path)
		case 2:
			return nil
		}
		state[m.Path] = 1
		for _, d := range deps[m.Path] {
			if i := slices.IndexFunc(released, func(x module) bool { return x.Path == d }); i >= 0 {
				if err := visit(released[i]); err != nil {
					return err
				}
			}
		}
		state[m.Path] = 2
		order = append(order, m)
		return nil
	}
	for _, m := range released {
		if err := visit(m); err != nil {
			return nil, err
		}
	}
	return order, nil
}

// consumer plays a new user: from a fresh module outside the repository it runs the
// README's go get and go install lines at the current version, builds and runs a program
// importing every released package a user imports, runs the installed CLI's --help, and
// reports the build list of a program importing core + the gorm adapter + the Kafka sink.
func consumer(root string) error {
	v, err := readVersions(root)
	if err != nil {
		return err
	}
	mods, err := workspace(root, v)
	if err != nil {
		return err
	}
	lines, err := readmeInstallLines(root)
	if err != nil {
		return err
	}
	c, err := newClone(root, v, mods, v.Version)
	if err != nil {
		return err
	}
	defer c.remove()

	// Every released module a user imports has its go get line in the README.
	var gets []string
	var installs []string
	for _, l := range lines {
		l = strings.ReplaceAll(l, "@latest", "@"+v.Version)
		if strings.HasPrefix(l, "go install ") {
			installs = append(installs, l)
		} else {
			gets = append(gets, l)
		}
	}
	var imports []string
	for _, m := range mods {
		if !m.Released || m.Path == repoPath+"/dbtest" || m.Path == repoPath+"/adapters/adaptertest" {
			continue
		}
		if m.Path == repoPath+"/cmd/outboxer" {
			if !slices.ContainsFunc(installs, func(l string) bool { return strings.Contains(l, " "+m.Path+"@") }) {
				return fmt.Errorf("README: no `go install %s@latest` line", m.Path)
			}
			continue
		}
		if !slices.ContainsFunc(gets, func(l string) bool { return strings.Contains(l, " "+m.Path+"@") }) {
			return fmt.Errorf("README: no `go get %s@latest` line", m.Path)
		}
		if m.Path == repoPath {
			imports = append(imports, repoPath+"/core")
		} else {
			imports = append(imports, m.Path)
		}
	}

	app := filepath.Join(c.tmp, "consumer")
	if err := os.MkdirAll(app, 0o755); err != nil {
		return err
	}
	if err := c.run(app, "go", "mod", "init", "example.com/consumer"); err != nil {
		return err
	}
	for _, l := range gets {
		fmt.Println("$", l)
		if err := c.run(app, "sh", "-c", l); err != nil {
			return fmt.Errorf("README line %q: %w", l, err)
		}
	}
	var src strings.Builder
	src.WriteString("// Command consumer imports every released package and prints their versions.\npackage main\n\nimport (\n\t\"fmt\"\n\t\"runtime/debug\"\n\t\"strings\"\n\n")
	for _, p := range imports {
		fmt.Fprintf(&src, "\t_ %q\n", p)
	}
	src.WriteString(")\n\nfunc main() {\n\tinfo, _ := debug.ReadBuildInfo()\n\tfor _, d := range info.Deps {\n\t\tif strings.HasPrefix(d.Path, \"" + repoPath + "\") {\n\t\t\tfmt.Println(d.Path, d.Version)\n\t\t}\n\t}\n}\n")
	if err := os.WriteFile(filepath.Join(app, "main.go"), []byte(src.String()), 0o644); err != nil {
		return err
	}
	if err := c.run(app, "go", "mod", "tidy"); err != nil {
		return err
	}
	out, err := c.output(app, "go", "run", ".")
	if err != nil {
		return fmt.Errorf("go run: %w", err)
	}
	fmt.Print(out)
	for _, p := range imports {
		mod := strings.TrimSuffix(p, "/core")
		if !strings.Contains(out, mod+" "+v.Version) {
			return fmt.Errorf("the consumer program did not build %s at %s", mod, v.Version)
		}
	}

	for _, l := range installs {
		fmt.Println("$", l)
		if err := c.run(app, "sh", "-c", l); err != nil {
			return fmt.Errorf("README line %q: %w", l, err)
		}
	}
	help, err := c.output(app, filepath.Join(c.gobin, "outboxer"), "--help")
	if err != nil && !strings.Contains(help, "Usage") {
		return fmt.Errorf("outboxer --help: %w\n%s", err, help)
	}
	fmt.Printf("$ outboxer --help\n%s", firstLines(help, 3))

	// The build list of the program the issue measures.
	small := filepath.Join(c.tmp, "small")
	if err := os.MkdirAll(small, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(small, "main.go"), []byte("package main\n\nimport (\n\t_ \""+repoPath+"/adapters/gorm\"\n\t_ \""+repoPath+"/core\"\n\t_ \""+repoPath+"/sinks/kafka\"\n)\n\nfunc main() {}\n"), 0o644); err != nil {
		return err
	}
	if err := c.run(small, "go", "mod", "init", "example.com/small"); err != nil {
		return err
	}
	for _, p := range []string{repoPath, repoPath + "/adapters/gorm", repoPath + "/sinks/kafka"} {
		if err := c.run(small, "go", "get", p+"@"+v.Version); err != nil {
			return err
		}
	}
	if err := c.run(small, "go", "mod", "tidy"); err != nil {
		return err
	}
	list, err := c.output(small, "go", "list", "-m", "all")
	if err != nil {
		return err
	}
	if err := c.run(small, "go", "build", "./..."); err != nil {
		return err
	}
	fmt.Printf("build list of a program importing core + adapters/gorm + sinks/kafka (go list -m all | wc -l): %d\n%s", strings.Count(list, "\n"), list)
	fmt.Printf("consumer: ok at %s\n", v.Version)
	return nil
}

// readmeInstallLines returns the `go get github.com/outboxer-go/...` and `go install ...`
// lines of the README's code blocks.
func readmeInstallLines(root string) ([]string, error) {
	b, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		return nil, err
	}
	var lines []string
	for _, l := range strings.Split(string(b), "\n") {
		l = strings.TrimSpace(l)
		if strings.HasPrefix(l, "go get "+repoPath) || strings.HasPrefix(l, "go install "+repoPath) {
			lines = append(lines, l)
		}
	}
	if len(lines) == 0 {
		return nil, errors.New("README.md has no go get / go install line")
	}
	return lines, nil
}

func firstLines(s string, n int) string {
	ls := strings.SplitAfter(s, "\n")
	if len(ls) > n {
		ls = ls[:n]
	}
	return strings.Join(ls, "")
}

// clone is a temporary copy of the working tree, committed and tagged, and the environment
// in which the go command reaches the released modules through it.
type clone struct {
	tmp   string // removed by remove
	dir   string // the copy of the working tree
	gobin string
	env   []string
}

func newClone(root string, v versions, mods []module, version string) (*clone, error) {
	tmp, err := os.MkdirTemp("", "outboxer-modules-")
	if err != nil {
		return nil, err
	}
	c := &clone{tmp: tmp, dir: filepath.Join(tmp, "repo"), gobin: filepath.Join(tmp, "bin")}
	ok := false
	defer func() {
		if !ok {
			c.remove()
		}
	}()
	files, err := exec.Command("git", "-C", root, "ls-files", "-z", "--cached", "--others", "--exclude-standard").Output()
	if err != nil {
		return nil, fmt.Errorf("listing the working tree: %w", err)
	}
	for _, name := range strings.Split(string(files), "\x00") {
		if name == "" {
			continue
		}
		src := filepath.Join(root, name)
		if fi, err := os.Lstat(src); err != nil || !fi.Mode().IsRegular() {
			continue // deleted in the working tree, or a link
		}
		dst := filepath.Join(c.dir, name)
		if err := copyFile(src, dst); err != nil {
			return nil, err
		}
		// go.sum lines for the released modules name the hash of a tagged release; the
		// tags of this copy are made here, so those lines would not match.
		if filepath.Base(name) == "go.sum" {
			if err := stripSiblingSums(dst); err != nil {
				return nil, err
			}
		}
	}
	home := filepath.Join(tmp, "home")
	if err := os.MkdirAll(home, 0o755); err != nil {
		return nil, err
	}
	gitconfig := fmt.Sprintf("[user]\n\tname = modules\n\temail = modules@localhost\n[url \"file://%s\"]\n\tinsteadOf = https://%s\n[init]\n\tdefaultBranch = main\n", c.dir, repoPath)
	if err := os.WriteFile(filepath.Join(home, ".gitconfig"), []byte(gitconfig), 0o644); err != nil {
		return nil, err
	}
	goenv := func(name string) string {
		out, _ := exec.Command("go", "env", name).Output()
		return strings.TrimSpace(string(out))
	}
	proxy := goenv("GOPROXY")
	if cache := goenv("GOMODCACHE"); cache != "" {
		// The machine's module cache serves what it already holds; the rest comes from the proxy.
		proxy = "file://" + filepath.Join(cache, "cache", "download") + "," + proxy
	}
	c.env = append(os.Environ(),
		"HOME="+home,
		"XDG_CONFIG_HOME="+filepath.Join(home, ".config"),
		"GOENV=off",
		"GOWORK=off",
		"GOFLAGS=-buildvcs=false",
		"GOPRIVATE="+strings.TrimSuffix(repoPath, "/outboxer"),
		"GOPROXY="+proxy,
		"GOMODCACHE="+filepath.Join(tmp, "modcache"),
		"GOCACHE="+goenv("GOCACHE"),
		"GOTOOLCHAIN=local",
		"GOBIN="+c.gobin,
		"GIT_CONFIG_NOSYSTEM=1",
	)
	for _, args := range [][]string{{"init", "-q"}, {"add", "-A"}, {"commit", "-q", "-m", "working tree"}} {
		if err := c.run(c.dir, "git", args...); err != nil {
			return nil, err
		}
	}
	// Every module is tagged, the unpublished too: a development module may require
	// another (the ent example's generated code, which the ent adapter's tests share).
	for _, m := range mods {
		if err := c.run(c.dir, "git", "tag", m.tagPrefix()+version); err != nil {
			return nil, err
		}
	}
	ok = true
	return c, nil
}

// tidy runs go mod tidy in the clone's copy of m and returns the names of the files
// (go.mod, go.sum) it changed, go.sum compared without the released modules' lines.
func (c *clone) tidy(m module) ([]string, error) {
	dir := filepath.Join(c.dir, m.Dir)
	before := map[string][]byte{}
	for _, name := range []string{"go.mod", "go.sum"} {
		b, _ := os.ReadFile(filepath.Join(dir, name))
		before[name] = b
	}
	if err := c.run(dir, "go", "mod", "tidy"); err != nil {
		return nil, fmt.Errorf("%s: go mod tidy: %w", m.Dir, err)
	}
	if err := stripSiblingSums(filepath.Join(dir, "go.sum")); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	var changed []string
	for _, name := range []string{"go.mod", "go.sum"} {
		b, _ := os.ReadFile(filepath.Join(dir, name))
		if !bytes.Equal(b, before[name]) {
			changed = append(changed, name)
		}
	}
	return changed, nil
}

func (c *clone) run(dir, name string, args ...string) error {
	out, err := c.output(dir, name, args...)
	if err != nil {
		return fmt.Errorf("%s %s (in %s): %w\n%s", name, strings.Join(args, " "), dir, err, out)
	}
	return nil
}

func (c *clone) output(dir, name string, args ...string) (string, error) {
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	cmd.Env = c.env
	var buf bytes.Buffer
	cmd.Stdout = &buf
	cmd.Stderr = &buf
	err := cmd.Run()
	return buf.String(), err
}

func (c *clone) remove() {
	// The module cache is read-only; go clean -modcache knows how to remove it.
	cmd := exec.Command("go", "clean", "-modcache")
	cmd.Env = c.env
	_ = cmd.Run()
	_ = os.RemoveAll(c.tmp)
}

// stripSiblingSums drops the go.sum lines of the repository's own modules: their hashes
// are those of a release's tags and change with every commit in between, so the committed
// go.sum files do not hold them (a consumer's go.sum has them, from the checksum database).
func stripSiblingSums(name string) error {
	b, err := os.ReadFile(name)
	if err != nil {
		return err
	}
	var out []byte
	for _, l := range bytes.SplitAfter(b, []byte("\n")) {
		if bytes.HasPrefix(l, []byte(repoPath+" ")) || bytes.HasPrefix(l, []byte(repoPath+"/")) {
			continue
		}
		out = append(out, l...)
	}
	if len(out) == 0 {
		return os.Remove(name)
	}
	return os.WriteFile(name, out, 0o644)
}

func copyFile(src, dst string) error {
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	fi, err := in.Stat()
	if err != nil {
		return err
	}
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, fi.Mode().Perm())
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// devProxy writes, under dir, a file module proxy (GOPROXY=file://dir) that serves each
// module of go.work (released, or required by another development module) at the version
// of versions.yaml with a go.mod naming only the module.
//
// In workspace mode the go command builds every released module from its directory, but
// it still reads the go.mod of the version the other modules require (for their go.sum
// lines in go.work.sum). Before that version is tagged no proxy has it; this one answers
// with a fixed file, so go.work.sum's lines for it never change. The Makefile puts it
// first in GOPROXY for every workspace command; a user never meets it.
func devProxy(root, dir string) error {
	v, err := readVersions(root)
	if err != nil {
		return err
	}
	mods, err := workspace(root, v)
	if err != nil {
		return err
	}
	if !filepath.IsAbs(dir) {
		dir = filepath.Join(root, dir)
	}
	for _, m := range mods {
		p := m.Path
		d := filepath.Join(dir, filepath.FromSlash(p), "@v")
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
		files := map[string]string{
			"list":              v.Version + "\n",
			v.Version + ".info": fmt.Sprintf("{\"Version\":%q}\n", v.Version),
			v.Version + ".mod":  "module " + p + "\n",
		}
		for name, content := range files {
			if err := os.WriteFile(filepath.Join(d, name), []byte(content), 0o644); err != nil {
				return err
			}
		}
	}
	return nil
}
