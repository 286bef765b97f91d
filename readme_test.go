package cninet_test

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

// fragmentMarker, on the line before a ```go block, says the block is a
// fragment, not a program: TestReadmeGoBlocksCompile leaves it out.
const fragmentMarker = "<!-- fragment -->"

// docFiles are the Markdown files whose code and links are checked.
func docFiles(t *testing.T) []string {
	t.Helper()
	docs, err := filepath.Glob(filepath.Join("docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	if len(docs) == 0 {
		t.Fatal("no docs/*.md")
	}
	return append([]string{"README.md", "CHANGELOG.md"}, docs...)
}

// mdLine is one line of a Markdown file, and whether it is inside a
// fenced code block (the fences included).
type mdLine struct {
	n      int // 1-based
	text   string
	inCode bool
}

func readMarkdown(t *testing.T, file string) []mdLine {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var lines []mdLine
	fence := "" // the open fence, "" outside code
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		text := sc.Text()
		trimmed := strings.TrimLeft(text, " ")
		switch {
		case fence == "" && (strings.HasPrefix(trimmed, "```") || strings.HasPrefix(trimmed, "~~~")):
			fence = trimmed[:3]
			lines = append(lines, mdLine{n, text, true})
		case fence != "" && strings.HasPrefix(trimmed, fence) && strings.TrimSpace(trimmed[3:]) == "":
			fence = ""
			lines = append(lines, mdLine{n, text, true})
		default:
			lines = append(lines, mdLine{n, text, fence != ""})
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if fence != "" {
		t.Fatalf("%s: a code block is never closed", file)
	}
	return lines
}

// goBlock is one ```go block of a Markdown file.
type goBlock struct {
	file     string
	line     int // the opening fence's
	code     string
	fragment bool
}

func goBlocks(t *testing.T, file string) []goBlock {
	t.Helper()
	lines := readMarkdown(t, file)
	var blocks []goBlock
	for i := 0; i < len(lines); i++ {
		open := strings.TrimLeft(lines[i].text, " ")
		if !lines[i].inCode || strings.TrimSpace(strings.TrimPrefix(open, "```")) != "go" {
			continue
		}
		indent := len(lines[i].text) - len(open)
		b := goBlock{file: file, line: lines[i].n}
		for j := i - 1; j >= 0; j-- { // the nearest non-blank line before the block
			if s := strings.TrimSpace(lines[j].text); s != "" {
				b.fragment = s == fragmentMarker
				break
			}
		}
		var code strings.Builder
		for i++; i < len(lines) && strings.TrimSpace(lines[i].text) != "```"; i++ {
			text := lines[i].text
			if len(text) >= indent && strings.TrimSpace(text[:indent]) == "" {
				text = text[indent:]
			}
			code.WriteString(text + "\n")
		}
		b.code = code.String()
		blocks = append(blocks, b)
	}
	return blocks
}

// goDirective is the go line of the repository's go.mod.
func goDirective(t *testing.T) string {
	t.Helper()
	mod, err := os.ReadFile("go.mod")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^go (\S+)$`).FindSubmatch(mod)
	if m == nil {
		t.Fatal("go.mod has no go line")
	}
	return string(m[1])
}

// Every ```go block of the README and docs/ that is not marked a
// fragment is a whole program, and it builds and vets against this
// repository's code, with the modules of its go.sum only.
func TestReadmeGoBlocksCompile(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is needed to build the documentation's code: %v", err)
	}
	root, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	mod := t.TempDir()
	where := map[string]goBlock{} // by the package dir it is built in
	readmeProgram := false
	for _, file := range docFiles(t) {
		for _, b := range goBlocks(t, file) {
			pos := fmt.Sprintf("%s:%d", b.file, b.line)
			if b.fragment {
				t.Logf("%s: a fragment, not built", pos)
				continue
			}
			if !strings.HasPrefix(strings.TrimSpace(b.code), "package ") {
				t.Errorf("%s: a ```go block without a package clause; make it a whole program or put %s on the line before it", pos, fragmentMarker)
				continue
			}
			if b.file == "README.md" && strings.Contains(b.code, "cninet.New(") && strings.Contains(b.code, ".Close()") {
				readmeProgram = true
			}
			dir := fmt.Sprintf("%s_L%d", strings.NewReplacer("/", "_", ".", "_").Replace(b.file), b.line)
			where[dir] = b
			if err := os.MkdirAll(filepath.Join(mod, dir), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(mod, dir, "main.go"), []byte(b.code), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	if !readmeProgram {
		t.Error("README.md has no whole program that builds a Configurator with cninet.New and closes it")
	}
	if len(where) == 0 {
		return
	}
	gomod := fmt.Sprintf("module example.com/cninetdocs\n\ngo %s\n\nrequire github.com/seed1280861d/cninet v0.0.0\n\nreplace github.com/seed1280861d/cninet => %s\n",
		goDirective(t), root)
	if err := os.WriteFile(filepath.Join(mod, "go.mod"), []byte(gomod), 0o644); err != nil {
		t.Fatal(err)
	}
	sum, err := os.ReadFile("go.sum")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(mod, "go.sum"), sum, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"build", "./..."}, {"vet", "./..."}} {
		cmd := exec.Command(goTool, args...)
		cmd.Dir = mod
		cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOPROXY=off", "GOWORK=off", "GOTOOLCHAIN=local")
		out, err := cmd.CombinedOutput()
		if err != nil {
			// Name the Markdown line, not the temporary file's.
			report := regexp.MustCompile(`([A-Za-z0-9_]+)/main\.go:(\d+)`).ReplaceAllStringFunc(string(out), func(s string) string {
				dir, rest, _ := strings.Cut(s, "/main.go:")
				b, ok := where[dir]
				var n int
				if _, err := fmt.Sscan(rest, &n); !ok || err != nil {
					return s
				}
				return fmt.Sprintf("%s:%d", b.file, b.line+n)
			})
			t.Errorf("go %s of the documentation's Go blocks: %v\n%s", strings.Join(args, " "), err, report)
		}
	}
}

var (
	// inlineLink matches [text](target) and ![alt](target); the target
	// ends at white space or ')' (an optional title follows).
	inlineLink = regexp.MustCompile(`!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)`)
	// refDefinition matches a reference definition: [label]: target.
	refDefinition = regexp.MustCompile(`^\s{0,3}\[[^\]]+\]:\s*<?([^\s>]+)>?`)
	codeSpan      = regexp.MustCompile("`+[^`]*`+")
	scheme        = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9+.-]*:`)
)

// headingAnchors are the anchors a Markdown renderer (GitHub's rules)
// gives the headings of file.
func headingAnchors(t *testing.T, file string) map[string]bool {
	t.Helper()
	anchors := map[string]bool{}
	seen := map[string]int{}
	for _, l := range readMarkdown(t, file) {
		if l.inCode {
			continue
		}
		text := strings.TrimLeft(l.text, " ")
		level := len(text) - len(strings.TrimLeft(text, "#"))
		if level == 0 || level > 6 || len(text) == level || text[level] != ' ' {
			continue
		}
		slug := slugify(strings.TrimSpace(text[level:]))
		if n := seen[slug]; n > 0 {
			anchors[fmt.Sprintf("%s-%d", slug, n)] = true
		} else {
			anchors[slug] = true
		}
		seen[slug]++
	}
	return anchors
}

// slugify makes a heading's anchor: lower case, letters, digits, '-'
// and '_' kept, spaces turned into '-', everything else dropped.
func slugify(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case unicode.IsLetter(r), unicode.IsDigit(r), r == '-', r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteRune('-')
		}
	}
	return b.String()
}

// Every relative link of the README, CHANGELOG and docs/ names a file or
// directory of the repository, and its #anchor, in a Markdown file, a
// heading there.
func TestReadmeLinksResolve(t *testing.T) {
	anchorsOf := map[string]map[string]bool{}
	checked := 0
	for _, file := range docFiles(t) {
		for _, l := range readMarkdown(t, file) {
			if l.inCode {
				continue
			}
			text := codeSpan.ReplaceAllString(l.text, "")
			var targets []string
			for _, m := range inlineLink.FindAllStringSubmatch(text, -1) {
				targets = append(targets, m[1])
			}
			if m := refDefinition.FindStringSubmatch(text); m != nil {
				targets = append(targets, m[1])
			}
			for _, target := range targets {
				if scheme.MatchString(target) {
					continue // a URL: not checked here
				}
				checked++
				pos := fmt.Sprintf("%s:%d", file, l.n)
				path, anchor, _ := strings.Cut(target, "#")
				dest := file // a bare #anchor is in the same file
				if path != "" {
					if filepath.IsAbs(path) {
						t.Errorf("%s: link %q is absolute; want a path relative to the file", pos, target)
						continue
					}
					dest = filepath.Join(filepath.Dir(file), filepath.FromSlash(path))
					if _, err := os.Stat(dest); err != nil {
						t.Errorf("%s: link %q: %v", pos, target, err)
						continue
					}
				}
				if anchor == "" || !strings.HasSuffix(dest, ".md") {
					continue
				}
				if anchorsOf[dest] == nil {
					anchorsOf[dest] = headingAnchors(t, dest)
				}
				if !anchorsOf[dest][anchor] {
					t.Errorf("%s: link %q: %s has no heading with anchor #%s", pos, target, dest, anchor)
				}
			}
		}
	}
	if checked == 0 {
		t.Error("no relative link found: the link parser is broken")
	}
}

// The anchors computed for headings are the ones links use.
func TestReadmeSlugify(t *testing.T) {
	for heading, want := range map[string]string{
		"Set up":               "set-up",
		"The `cninet` command": "the-cninet-command",
		"6. Allocations (go test -bench -benchmem)":                     "6-allocations-go-test--bench--benchmem",
		"8. Thick mode: cnitool through the cninet-shim and the daemon": "8-thick-mode-cnitool-through-the-cninet-shim-and-the-daemon",
	} {
		if got := slugify(heading); got != want {
			t.Errorf("slugify(%q) = %q, want %q", heading, got, want)
		}
	}
}
