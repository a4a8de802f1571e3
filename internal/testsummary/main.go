// Command testsummary reads `go test -json` on its standard input and
// prints what a person needs from it: each package's result, the output
// of every test that failed, and at the end one line
// "N passed, N failed, N skipped" followed by each skip and its reason.
// It exits 1 if anything failed (a test, a package, a build).
//
// With -save FILE it also keeps the events it read, and with -total it
// reads saved files instead of its input and prints one summary over
// them: `make test` runs each suite through it and totals them at the
// end.
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"sort"
	"strings"
)

// event is one line of `go test -json` (test2json).
type event struct {
	Action  string
	Package string
	Test    string
	Output  string
	Elapsed float64
}

// tally is what a run found.
type tally struct {
	passed, failed int
	skips          []string // "pkg TestX: reason"
	failures       []string // "pkg TestX", or "pkg" for a package or build
	why            []string // the failed tests' own lines (failReason)
	output         map[string][]string
}

func main() {
	save := flag.String("save", "", "also write the events read to `file`")
	total := flag.Bool("total", false, "summarise the saved files named as arguments instead of the input")
	flag.Parse()
	t := &tally{output: map[string][]string{}}
	var err error
	if *total {
		for _, name := range flag.Args() {
			if err = readFile(t, name, false); err != nil {
				break
			}
		}
	} else {
		err = read(t, os.Stdin, *save, true)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "testsummary:", err)
		os.Exit(2)
	}
	t.print(os.Stdout)
	if t.failed > 0 || len(t.failures) > 0 {
		os.Exit(1)
	}
}

func readFile(t *tally, name string, echo bool) error {
	f, err := os.Open(name)
	if err != nil {
		return err
	}
	defer f.Close()
	return read(t, f, "", echo)
}

// read tallies the events of r, echoing package results and failed
// tests' output as they end when echo is set.
func read(t *tally, r io.Reader, save string, echo bool) error {
	var w io.Writer = io.Discard
	if save != "" {
		f, err := os.Create(save)
		if err != nil {
			return err
		}
		defer f.Close()
		w = f
	}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		line := sc.Bytes()
		fmt.Fprintf(w, "%s\n", line)
		var e event
		if json.Unmarshal(line, &e) != nil {
			if echo { // not JSON: a build error printed before the events
				fmt.Printf("%s\n", line)
			}
			continue
		}
		t.add(e, echo)
	}
	return sc.Err()
}

func (t *tally) add(e event, echo bool) {
	key := e.Package + " " + e.Test
	switch e.Action {
	case "output", "build-output":
		t.output[key] = append(t.output[key], e.Output)
	case "pass":
		if e.Test != "" {
			t.passed++
		} else if echo {
			fmt.Printf("ok  \t%s\t%.3fs\n", e.Package, e.Elapsed)
		}
		delete(t.output, key)
	case "skip":
		if e.Test != "" {
			t.skips = append(t.skips, fmt.Sprintf("%s %s: %s", e.Package, e.Test, skipReason(t.output[key])))
		} else if echo {
			fmt.Printf("?   \t%s\t[no test files]\n", e.Package)
		}
		delete(t.output, key)
	case "fail":
		if e.Test != "" {
			t.failed++
		}
		t.failures = append(t.failures, strings.TrimSpace(key))
		if e.Test != "" {
			t.why = append(t.why, failReason(strings.TrimSpace(key), t.output[key])...)
		}
		if echo {
			fmt.Print(strings.Join(t.output[key], ""))
			if e.Test == "" {
				fmt.Printf("FAIL\t%s\t%.3fs\n", e.Package, e.Elapsed)
			}
		}
		delete(t.output, key)
	}
}

// skipReason is what t.Skip printed: the lines of a skipped test's
// output other than its === and --- lines.
func skipReason(out []string) string {
	var why []string
	for _, l := range out {
		l = strings.TrimSpace(l)
		if l == "" || strings.HasPrefix(l, "=== ") || strings.HasPrefix(l, "--- ") {
			continue
		}
		why = append(why, l)
	}
	if len(why) == 0 {
		return "(no reason given)"
	}
	return strings.Join(why, " / ")
}

// failReason is what a failed test said of itself, for the summary's
// last lines, which are what a reader of a long log's tail sees: its
// own log lines (file.go:N: ...), each cut short, the first and last
// six of more, without the lines
// that continue them (a daemon's output the test dumps, a long
// message's body).
func failReason(test string, out []string) []string {
	const most, width = 12, 400
	var why []string
	for _, l := range out {
		if !ownLine.MatchString(l) || strings.Contains(l, "daemon output for") {
			continue
		}
		l = strings.TrimSpace(l)
		if len(l) > width {
			l = l[:width] + " ..."
		}
		why = append(why, fmt.Sprintf("WHY %s: %s", test, l))
	}
	if len(why) > most {
		why = append(why[:most/2], why[len(why)-most/2:]...)
	}
	return why
}

// ownLine is a line t.Log, t.Error or t.Fatal began: four spaces, then
// the file and line (more spaces in a subtest).
var ownLine = regexp.MustCompile(`^ {4,}[\w.-]+\.go:\d+: `)

func (t *tally) print(w io.Writer) {
	sort.Strings(t.skips)
	fmt.Fprintf(w, "%d passed, %d failed, %d skipped\n", t.passed, t.failed, len(t.skips))
	for _, s := range t.skips {
		fmt.Fprintf(w, "SKIP %s\n", s)
	}
	for _, f := range t.failures {
		fmt.Fprintf(w, "FAIL %s\n", f)
	}
	for _, l := range t.why {
		fmt.Fprintln(w, l)
	}
}
