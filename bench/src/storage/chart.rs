//! A bar chart of target ratios as hand-written SVG: one group of bars per target, one bar per
//! value size, the target as a dashed line across its group, a numbered key below.

use std::fmt::Write as _;

use super::goal::Goal;

/// One group of bars.
pub struct ChartGroup {
    /// What the ratio compares (printed in the key).
    pub label: String,
    /// Decimals of the bar labels.
    pub digits: usize,
    /// The target.
    pub goal: Goal,
    /// `(value size, ratio)`; `None` where the measurement failed.
    pub bars: Vec<(String, Option<f64>)>,
}

const BAR_W: f64 = 40.0;
const BAR_GAP: f64 = 6.0;
const MIN_GROUP_W: f64 = 76.0;
const GROUP_GAP: f64 = 34.0;
const LEFT: f64 = 56.0;
const RIGHT: f64 = 24.0;
const TOP: f64 = 74.0;
const PLOT_H: f64 = 300.0;
const UNDER: f64 = 52.0;
const KEY_LINE: f64 = 17.0;
/// The y axis stops here; a taller bar is cut with a break mark (its label keeps its value).
const Y_CAP: f64 = 4.0;
const MET: &str = "#2e7d32";
const MISSED: &str = "#c62828";

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

fn group_width(g: &ChartGroup) -> f64 {
    let n = g.bars.len().max(1) as f64;
    (n * BAR_W + (n - 1.0) * BAR_GAP).max(MIN_GROUP_W)
}

/// The top of the y axis and its grid step: room above the tallest bar or goal, up to
/// [`Y_CAP`].
fn y_scale(groups: &[ChartGroup]) -> (f64, f64) {
    let top = groups
        .iter()
        .flat_map(|g| {
            g.bars
                .iter()
                .filter_map(|(_, r)| *r)
                .chain(g.goal.threshold())
        })
        .filter(|r| r.is_finite())
        .fold(1.0f64, f64::max)
        .min(Y_CAP)
        * 1.12;
    let step = if top <= 1.5 { 0.25 } else { 0.5 };
    ((top / step).ceil() * step, step)
}

/// The chart as an SVG document.
pub fn svg(title: &str, groups: &[ChartGroup]) -> String {
    let plot_w: f64 = groups.iter().map(group_width).sum::<f64>()
        + GROUP_GAP * (groups.len().saturating_sub(1)) as f64
        + GROUP_GAP;
    let width = (LEFT + plot_w + RIGHT).max(640.0);
    let key_top = TOP + PLOT_H + UNDER;
    let height = key_top + KEY_LINE * groups.len() as f64 + 16.0;
    let (ymax, step) = y_scale(groups);
    let y = |r: f64| TOP + PLOT_H - (r.clamp(0.0, ymax) / ymax) * PLOT_H;
    let prec = if step < 0.5 { 2 } else { 1 };

    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0}" height="{height:.0}" viewBox="0 0 {width:.0} {height:.0}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(
        s,
        r#"<rect width="100%" height="100%" fill="white"/>
<text x="{LEFT}" y="24" font-size="16" font-weight="bold">{}</text>"#,
        esc(title)
    );
    // Legend.
    let _ = writeln!(
        s,
        r##"<rect x="{LEFT}" y="38" width="12" height="12" fill="{MET}"/><text x="{}" y="48">target met</text>
<rect x="{}" y="38" width="12" height="12" fill="{MISSED}"/><text x="{}" y="48">target missed</text>
<line x1="{}" y1="44" x2="{}" y2="44" stroke="#333" stroke-width="2" stroke-dasharray="6,4"/><text x="{}" y="48">target (ratio against the floor measured in the same run)</text>"##,
        LEFT + 16.0,
        LEFT + 110.0,
        LEFT + 126.0,
        LEFT + 240.0,
        LEFT + 270.0,
        LEFT + 276.0,
    );
    // Grid and y axis.
    let mut tick = 0.0;
    while tick <= ymax + 1e-9 {
        let ty = y(tick);
        let _ = writeln!(
            s,
            r##"<line x1="{LEFT}" y1="{ty:.1}" x2="{:.1}" y2="{ty:.1}" stroke="{}" stroke-width="1"/><text x="{:.1}" y="{:.1}" text-anchor="end" fill="#555">{tick:.prec$}×</text>"##,
            LEFT + plot_w,
            if tick == 0.0 { "#333" } else { "#e3e3e3" },
            LEFT - 6.0,
            ty + 4.0,
        );
        tick += step;
    }
    let mut x = LEFT + GROUP_GAP / 2.0;
    for (i, g) in groups.iter().enumerate() {
        let gw = group_width(g);
        let n = g.bars.len() as f64;
        let bars_w = n * BAR_W + (n - 1.0).max(0.0) * BAR_GAP;
        let mut bx = x + (gw - bars_w) / 2.0;
        let digits = g.digits;
        for (size, ratio) in &g.bars {
            let cx = bx + BAR_W / 2.0;
            match ratio {
                Some(r) => {
                    let color = if g.goal.met(*r).unwrap_or(true) {
                        MET
                    } else {
                        MISSED
                    };
                    let top = y(*r);
                    let _ = writeln!(
                        s,
                        r#"<rect x="{bx:.1}" y="{top:.1}" width="{BAR_W}" height="{:.1}" fill="{color}"><title>{} at {}: {r:.2}×</title></rect>
<text x="{cx:.1}" y="{:.1}" text-anchor="middle" font-size="11" stroke="white" stroke-width="3" paint-order="stroke">{r:.digits$}</text>"#,
                        (TOP + PLOT_H - top).max(0.5),
                        esc(&g.label),
                        esc(size),
                        top - 4.0,
                    );
                    if *r > ymax {
                        // Cut: a white zigzag across the bar below its top.
                        let (l, m, rr, z) = (bx - 2.0, cx, bx + BAR_W + 2.0, top + 14.0);
                        let _ = writeln!(
                            s,
                            r#"<polyline points="{l:.1},{:.1} {m:.1},{:.1} {rr:.1},{:.1}" fill="none" stroke="white" stroke-width="4"/>"#,
                            z + 4.0,
                            z - 4.0,
                            z + 4.0,
                        );
                    }
                }
                None => {
                    let _ = writeln!(
                        s,
                        r#"<text x="{cx:.1}" y="{:.1}" text-anchor="middle" font-size="11" fill="{MISSED}">failed</text>"#,
                        TOP + PLOT_H - 4.0
                    );
                }
            }
            let _ = writeln!(
                s,
                r##"<text x="{cx:.1}" y="{:.1}" text-anchor="middle" font-size="11" fill="#333">{}</text>"##,
                TOP + PLOT_H + 15.0,
                esc(size)
            );
            bx += BAR_W + BAR_GAP;
        }
        if let Some(t) = g.goal.threshold() {
            let ty = y(t);
            let _ = writeln!(
                s,
                r##"<line x1="{:.1}" y1="{ty:.1}" x2="{:.1}" y2="{ty:.1}" stroke="#333" stroke-width="2" stroke-dasharray="6,4"/>"##,
                x - 6.0,
                x + gw + 6.0,
            );
        }
        let _ = writeln!(
            s,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="middle" font-weight="bold">{}</text>
<text x="{:.1}" y="{:.1}" text-anchor="middle" font-size="11">{}</text>"#,
            x + gw / 2.0,
            TOP + PLOT_H + 32.0,
            i + 1,
            x + gw / 2.0,
            TOP + PLOT_H + 46.0,
            esc(&g.goal.describe()),
        );
        x += gw + GROUP_GAP;
    }
    for (i, g) in groups.iter().enumerate() {
        let _ = writeln!(
            s,
            r#"<text x="{LEFT}" y="{:.1}"><tspan font-weight="bold">{}</tspan>  {} (target {})</text>"#,
            key_top + KEY_LINE * (i as f64 + 0.8),
            i + 1,
            esc(&g.label),
            esc(&g.goal.describe()),
        );
    }
    s.push_str("</svg>\n");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bars_are_coloured_by_their_goal_and_the_axis_covers_them() {
        let groups = [
            ChartGroup {
                label: "a < b".into(),
                digits: 2,
                goal: Goal::AtLeast(0.9),
                bars: vec![("100 B".into(), Some(0.5)), ("1 KiB".into(), Some(1.2))],
            },
            ChartGroup {
                label: "p50".into(),
                digits: 3,
                goal: Goal::AtMost(2.0),
                bars: vec![("100 B".into(), Some(3.1)), ("1 KiB".into(), None)],
            },
        ];
        let doc = svg("t", &groups);
        assert!(doc.starts_with("<svg ") && doc.trim_end().ends_with("</svg>"));
        // Two met bars' colour in the legend plus one bar; two missed bars plus the legend.
        assert_eq!(doc.matches(MET).count(), 2, "{doc}");
        assert_eq!(doc.matches(MISSED).count(), 4, "{doc}");
        assert!(doc.contains("a &lt; b"), "{doc}");
        assert!(doc.contains(">failed<"), "{doc}");
        assert_eq!(doc.matches("stroke-dasharray").count(), 3, "{doc}");
        let (top, step) = y_scale(&groups);
        assert!(top >= 3.1 && step == 0.5, "{top} {step}");
        assert!(!doc.contains("<polyline"), "{doc}");
        let tall = [ChartGroup {
            label: "tall".into(),
            digits: 2,
            goal: Goal::AtMost(2.0),
            bars: vec![("16 KiB".into(), Some(60.0))],
        }];
        assert!(y_scale(&tall).0 <= Y_CAP * 1.12 + 0.5);
        let doc = svg("t", &tall);
        assert!(
            doc.contains("<polyline") && doc.contains(">60.00<"),
            "{doc}"
        );
    }
}
