//! `--plot FILE.svg`: rates over time (one line per CPU or worker) and
//! latency distributions, drawn with plotters' SVG backend only (text is
//! written as SVG `<text>` and sized by plotters' built-in estimate, so no
//! font library or system font is needed).

use anyhow::{anyhow, Context, Result};
use plotters::prelude::*;
use std::path::Path;

/// One line of a chart: a name for the legend and (x, y) points.
#[derive(Debug, Clone, Default)]
pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
}

const W: u32 = 960;
const H: u32 = 540;

fn range(vals: impl Iterator<Item = f64>) -> (f64, f64) {
    let (lo, hi) = vals.fold((f64::INFINITY, f64::NEG_INFINITY), |(l, h), v| (l.min(v), h.max(v)));
    if !lo.is_finite() || !hi.is_finite() {
        return (0.0, 1.0);
    }
    if hi - lo < 1e-9 {
        return (lo, lo + 1.0);
    }
    (lo, hi)
}

/// Lines over time: `x` seconds, `y` a rate (`y_label`), one line per series.
pub fn lines(path: &Path, title: &str, x_label: &str, y_label: &str, series: &[Series]) -> Result<()> {
    let (x0, x1) = range(series.iter().flat_map(|s| s.points.iter().map(|p| p.0)));
    let (_, y1) = range(series.iter().flat_map(|s| s.points.iter().map(|p| p.1)).chain([0.0]));
    draw(path, |root| {
        let mut chart = ChartBuilder::on(root)
            .caption(title, ("sans-serif", 22))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(80)
            .build_cartesian_2d(x0..x1, 0.0..y1 * 1.05)?;
        chart.configure_mesh().x_desc(x_label).y_desc(y_label).draw()?;
        for (i, s) in series.iter().enumerate() {
            let color = Palette99::pick(i).to_rgba();
            chart
                .draw_series(LineSeries::new(s.points.iter().copied(), color.stroke_width(2)))?
                .label(s.name.clone())
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(2)));
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .position(SeriesLabelPosition::UpperRight)
            .draw()?;
        Ok(())
    })
}

/// A latency distribution: (upper bound in microseconds, count) buckets,
/// drawn as bars on a log2 axis of latency.
#[allow(dead_code)] // the load tools' --plot comes next
pub fn latency(path: &Path, title: &str, buckets: &[(f64, u64)]) -> Result<()> {
    let pts: Vec<(f64, f64)> =
        buckets.iter().filter(|b| b.0 > 0.0).map(|&(us, n)| (us.log2(), n as f64)).collect();
    let (x0, x1) = range(pts.iter().map(|p| p.0));
    let (_, y1) = range(pts.iter().map(|p| p.1).chain([0.0]));
    draw(path, |root| {
        let mut chart = ChartBuilder::on(root)
            .caption(title, ("sans-serif", 22))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(80)
            .build_cartesian_2d((x0 - 0.5)..(x1 + 0.5), 0.0..y1 * 1.05)?;
        chart
            .configure_mesh()
            .x_desc("latency (µs, log scale)")
            .y_desc("count")
            .x_label_formatter(&|x| format!("{:.0}", x.exp2()))
            .draw()?;
        chart.draw_series(
            pts.iter().map(|&(x, y)| Rectangle::new([(x - 0.4, 0.0), (x + 0.4, y)], BLUE.mix(0.6).filled())),
        )?;
        Ok(())
    })
}

fn draw(
    path: &Path,
    f: impl FnOnce(&DrawingArea<SVGBackend, plotters::coord::Shift>) -> Result<(), Box<dyn std::error::Error>>,
) -> Result<()> {
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (W, H)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| anyhow!("drawing the plot: {e}"))?;
        f(&root).map_err(|e| anyhow!("drawing the plot: {e}"))?;
        root.present().map_err(|e| anyhow!("drawing the plot: {e}"))?;
    }
    std::fs::write(path, svg).with_context(|| format!("--plot: writing {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_and_latency_are_svg() {
        let dir = std::env::temp_dir().join(format!("rsskit-plot-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("l.svg");
        let s = vec![
            Series { name: "cpu0".into(), points: vec![(1.0, 10.0), (2.0, 30.0)] },
            Series { name: "cpu1".into(), points: vec![(1.0, 0.0), (2.0, 5.0)] },
        ];
        lines(&p, "t", "s", "pkt/s", &s).unwrap();
        let t = std::fs::read_to_string(&p).unwrap();
        assert!(t.contains("<svg") && t.contains("cpu1"), "{t}");
        // No data at all still draws (empty axes), never panics.
        lines(&p, "t", "s", "pkt/s", &[]).unwrap();
        latency(&p, "lat", &[(1.0, 3), (2.0, 10), (64.0, 1)]).unwrap();
        latency(&p, "lat", &[]).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
