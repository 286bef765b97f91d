package main

import (
	"fmt"
	"strings"
	"time"
)

// plot draws, as plain SVG, the overhead ratio against the number of other
// attachments per plugin set, two bar charts, concurrency and recovery,
// and the median Teardown against the host size under pressure.
func (r *report) plot() string {
	var b strings.Builder
	const width, height = 900, 1120
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="12">`+"\n", width, height)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", width, height)
	r.ratioChart(&b, 20, 0)
	var groups []barGroup
	if r.res.Conc != nil {
		for _, l := range r.res.Conc.Levels {
			groups = append(groups, barGroup{fmt.Sprintf("k=%d", l.K), l.PerAlloc.median(), l.Global.median()})
		}
	}
	chart(&b, 20, 400, "Concurrency: wall time for k Setup+Teardown", groups, "per-allocation lock", "global lock")
	if rc := r.res.Recovery; rc != nil {
		chart(&b, 470, 400, "Recovery: time until ready or given up (median)", []barGroup{{"first ADD fails", rc.Lib.median(), rc.Fixed.median()}},
			"cninet DefaultRetryPolicy", "fixed 1 s + jitter, no DEL (never ready)")
	}
	r.pressureChart(&b, 20, 760)
	b.WriteString("</svg>\n")
	return b.String()
}

var setColors = []string{"#2b7bb9", "#d95f02", "#1b9e77", "#7570b3"}

// ratioChart plots cninet/go-cni (ratio of medians) against the number of
// other attachments, one line per plugin set, with the target dashed.
func (r *report) ratioChart(b *strings.Builder, x0, y0 int) {
	const top, height, width = 50, 260, 560
	fmt.Fprintf(b, `<text x="%d" y="%d" font-size="14" font-weight="bold">Overhead at scale: cninet / go-cni, median Setup+Teardown, vs. other attachments on the host</text>`+"\n", x0, y0+24)
	var sets []string
	bySet := map[string][]scaleResult{}
	maxN := 1
	lo, hi := 0.95, overheadTarget+0.02
	for _, s := range r.res.Scale {
		if _, ok := bySet[s.Set.Name]; !ok {
			sets = append(sets, s.Set.Name)
		}
		bySet[s.Set.Name] = append(bySet[s.Set.Name], s)
		maxN = max(maxN, s.Others)
		q := ratio(s.Lib.median(), s.Direct.median())
		lo, hi = min(lo, q-0.01), max(hi, q+0.01)
	}
	// round the axis to 0.05
	lo, hi = float64(int(lo*20))/20, float64(int(hi*20+0.999))/20
	x := func(n int) int { return x0 + 50 + int(float64(width-60)*float64(n)/float64(maxN)) }
	y := func(q float64) int { return y0 + top + height - int(float64(height)*(q-lo)/(hi-lo)) }
	fmt.Fprintf(b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#333"/>`+"\n", x0+50, y0+top+height, x0+width, y0+top+height)
	fmt.Fprintf(b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#333"/>`+"\n", x0+50, y0+top, x0+50, y0+top+height)
	for q := lo; q <= hi+1e-9; q += 0.05 {
		fmt.Fprintf(b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#ddd"/>`+"\n", x0+50, y(q), x0+width, y(q))
		fmt.Fprintf(b, `<text x="%d" y="%d" text-anchor="end">%.2f×</text>`+"\n", x0+45, y(q)+4, q)
	}
	fmt.Fprintf(b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#c00" stroke-dasharray="6,4"/>`+"\n", x0+50, y(overheadTarget), x0+width, y(overheadTarget))
	fmt.Fprintf(b, `<text x="%d" y="%d" fill="#c00" font-size="10">target %.2f×</text>`+"\n", x0+width+4, y(overheadTarget)+4, overheadTarget)
	fmt.Fprintf(b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#999"/>`+"\n", x0+50, y(1), x0+width, y(1))
	seen := map[int]bool{}
	for _, s := range r.res.Scale {
		if !seen[s.Others] {
			seen[s.Others] = true
			fmt.Fprintf(b, `<text x="%d" y="%d" text-anchor="middle">%d</text>`+"\n", x(s.Others), y0+top+height+16, s.Others)
		}
	}
	fmt.Fprintf(b, `<text x="%d" y="%d" text-anchor="middle">other attachments on the host (both families; nftables too for the nftables set)</text>`+"\n", x0+50+(width-50)/2, y0+top+height+34)
	if len(sets) == 0 {
		fmt.Fprintf(b, `<text x="%d" y="%d">(overhead-scale not measured)</text>`+"\n", x0+80, y0+top+40)
	}
	for i, name := range sets {
		color := setColors[i%len(setColors)]
		var pts []string
		for _, s := range bySet[name] {
			q := ratio(s.Lib.median(), s.Direct.median())
			pts = append(pts, fmt.Sprintf("%d,%d", x(s.Others), y(q)))
			fmt.Fprintf(b, `<circle cx="%d" cy="%d" r="4" fill="%s"/>`+"\n", x(s.Others), y(q), color)
			fmt.Fprintf(b, `<text x="%d" y="%d" font-size="10" fill="%s">%.3f</text>`+"\n", x(s.Others)+6, y(q)-6+12*i, color, q)
		}
		fmt.Fprintf(b, `<polyline points="%s" fill="none" stroke="%s" stroke-width="2"/>`+"\n", strings.Join(pts, " "), color)
		fmt.Fprintf(b, `<rect x="%d" y="%d" width="10" height="10" fill="%s"/><text x="%d" y="%d">%s</text>`+"\n",
			x0+width+80, y0+top+20+i*20, color, x0+width+96, y0+top+29+i*20, name)
	}
}

type barGroup struct {
	label string
	a, b  time.Duration
}

func chart(b *strings.Builder, x0, y0 int, title string, groups []barGroup, aName, bName string) {
	const top, height, width = 50, 240, 400
	var maxD time.Duration
	for _, g := range groups {
		maxD = max(maxD, g.a, g.b)
	}
	if maxD == 0 {
		maxD = 1
	}
	fmt.Fprintf(b, `<text x="%d" y="%d" font-size="14" font-weight="bold">%s</text>`+"\n", x0, y0+24, title)
	fmt.Fprintf(b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#333"/>`+"\n", x0, y0+top+height, x0+width, y0+top+height)
	slot := width / max(len(groups), 1)
	for i, g := range groups {
		x := x0 + i*slot + slot/6
		bw := slot / 3
		for j, d := range []time.Duration{g.a, g.b} {
			h := int(float64(height) * float64(d) / float64(maxD))
			color := []string{"#2b7bb9", "#d95f02"}[j]
			fmt.Fprintf(b, `<rect x="%d" y="%d" width="%d" height="%d" fill="%s"/>`+"\n", x+j*bw, y0+top+height-h, bw-2, h, color)
			fmt.Fprintf(b, `<text x="%d" y="%d" font-size="10" text-anchor="middle">%s</text>`+"\n", x+j*bw+bw/2, y0+top+height-h-4, short(d))
		}
		fmt.Fprintf(b, `<text x="%d" y="%d" text-anchor="middle">%s</text>`+"\n", x+bw, y0+top+height+16, g.label)
	}
	for j, name := range []string{aName, bName} {
		color := []string{"#2b7bb9", "#d95f02"}[j]
		fmt.Fprintf(b, `<rect x="%d" y="%d" width="10" height="10" fill="%s"/><text x="%d" y="%d">%s</text>`+"\n",
			x0, y0+top+height+30+j*16, color, x0+16, y0+top+height+39+j*16, name)
	}
}

func short(d time.Duration) string {
	if d >= time.Second {
		return fmt.Sprintf("%.2fs", d.Seconds())
	}
	return fmt.Sprintf("%dms", d.Milliseconds())
}
