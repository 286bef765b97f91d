package main

import (
	"fmt"
	"strings"
	"time"
)

// plot draws two bar charts, concurrency and recovery, as plain SVG.
func (r *report) plot() string {
	var b strings.Builder
	b.WriteString(`<svg xmlns="http://www.w3.org/2000/svg" width="900" height="360" font-family="sans-serif" font-size="12">` + "\n")
	b.WriteString(`<rect width="900" height="360" fill="white"/>` + "\n")
	var groups []barGroup
	for _, l := range r.conc {
		groups = append(groups, barGroup{fmt.Sprintf("k=%d", l.k), l.perAlloc.median(), l.global.median()})
	}
	chart(&b, 20, "Concurrency: wall time for k Setup+Teardown", groups, "per-allocation lock", "global lock")
	chart(&b, 470, "Recovery: time until ready, or until it gave up (median)", []barGroup{{"first ADD fails", r.recovery.lib.median(), r.recovery.fixed.median()}},
		"cninet DefaultRetryPolicy", "fixed 1 s + jitter, no DEL (never ready)")
	b.WriteString("</svg>\n")
	return b.String()
}

type barGroup struct {
	label string
	a, b  time.Duration
}

func chart(b *strings.Builder, x0 int, title string, groups []barGroup, aName, bName string) {
	const top, height, width = 50, 240, 400
	var maxD time.Duration
	for _, g := range groups {
		maxD = max(maxD, g.a, g.b)
	}
	if maxD == 0 {
		maxD = 1
	}
	fmt.Fprintf(b, `<text x="%d" y="24" font-size="14" font-weight="bold">%s</text>`+"\n", x0, title)
	fmt.Fprintf(b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#333"/>`+"\n", x0, top+height, x0+width, top+height)
	slot := width / max(len(groups), 1)
	for i, g := range groups {
		x := x0 + i*slot + slot/6
		bw := slot / 3
		for j, d := range []time.Duration{g.a, g.b} {
			h := int(float64(height) * float64(d) / float64(maxD))
			color := []string{"#2b7bb9", "#d95f02"}[j]
			fmt.Fprintf(b, `<rect x="%d" y="%d" width="%d" height="%d" fill="%s"/>`+"\n", x+j*bw, top+height-h, bw-2, h, color)
			fmt.Fprintf(b, `<text x="%d" y="%d" font-size="10" text-anchor="middle">%s</text>`+"\n", x+j*bw+bw/2, top+height-h-4, short(d))
		}
		fmt.Fprintf(b, `<text x="%d" y="%d" text-anchor="middle">%s</text>`+"\n", x+bw, top+height+16, g.label)
	}
	for j, name := range []string{aName, bName} {
		color := []string{"#2b7bb9", "#d95f02"}[j]
		fmt.Fprintf(b, `<rect x="%d" y="%d" width="10" height="10" fill="%s"/><text x="%d" y="%d">%s</text>`+"\n",
			x0, top+height+30+j*16, color, x0+16, top+height+39+j*16, name)
	}
}

func short(d time.Duration) string {
	if d >= time.Second {
		return fmt.Sprintf("%.2fs", d.Seconds())
	}
	return fmt.Sprintf("%dms", d.Milliseconds())
}
