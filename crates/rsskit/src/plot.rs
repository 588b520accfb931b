//! `--plot FILE.svg`: rates over time (one line per CPU or worker) and
//! latency distributions, drawn with plotters' SVG backend only (text is
//! written as SVG `<text>` and sized by plotters' built-in estimate, so no
//! font library or system font is needed).

use anyhow::{anyhow, Context, Result};
use plotters::prelude::*;
use std::fs::{File, OpenOptions};
use std::io::Write as _;
use std::os::unix::fs::{MetadataExt as _, OpenOptionsExt as _};
use std::path::{Path, PathBuf};

/// One line of a chart: a name for the legend and (x, y) points.
#[derive(Debug, Clone, Default)]
pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
}

impl Series {
    /// Appends `(t, v)` to the series named `name` in `all`, creating it.
    pub fn push(all: &mut Vec<Series>, name: &str, t: f64, v: f64) {
        match all.iter_mut().find(|s| s.name == name) {
            Some(s) => s.points.push((t, v)),
            None => all.push(Series { name: name.to_string(), points: vec![(t, v)] }),
        }
    }
}

const W: u32 = 960;
const H: u32 = 540;

type Area<'a> = DrawingArea<SVGBackend<'a>, plotters::coord::Shift>;
type DrawResult = Result<(), Box<dyn std::error::Error>>;

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

/// Rates over time (`x` seconds), one line per series: an SVG file.
pub fn lines(path: &Path, title: &str, x_label: &str, y_label: &str, series: &[Series]) -> Result<()> {
    write(path, (W, H), |root| draw_lines(root, title, x_label, y_label, series))
}

/// A load tool's chart: rates over time on top, the latency distribution
/// ((upper bound in µs, count) buckets) below.
pub fn load(
    path: &Path,
    title: &str,
    y_label: &str,
    series: &[Series],
    latency: &[(f64, u64)],
) -> Result<()> {
    write(path, (W, 2 * H), |root| {
        let (top, bottom) = root.split_vertically(H);
        draw_lines(&top, title, "seconds", y_label, series)?;
        draw_latency(&bottom, "latency distribution", latency)
    })
}

/// Counts per interval from cumulative totals: (t, total) -> (t, per second).
pub fn per_second(points: &[(f64, u64)]) -> Vec<(f64, f64)> {
    let mut out = Vec::new();
    let mut prev = (0.0, 0u64);
    for &(t, n) in points {
        let dt = t - prev.0;
        if dt > 0.0 {
            out.push((t, n.saturating_sub(prev.1) as f64 / dt));
        }
        prev = (t, n);
    }
    out
}

/// `udp-load --plot`: sent and echoed datagrams/s, RTT distribution.
pub fn udp_load(path: &Path, target: &str, r: &rsskit_runtime::udp_load::LoadReport) -> Result<()> {
    // The per-second totals, then the run's end (a last partial second).
    let mut totals = r.per_second.clone();
    if totals.last().is_none_or(|l| l.0 < r.elapsed_s) {
        totals.push((r.elapsed_s, r.sent, r.echoed));
    }
    let sent: Vec<(f64, u64)> = totals.iter().map(|&(t, s, _)| (t, s)).collect();
    let echoed: Vec<(f64, u64)> = totals.iter().map(|&(t, _, e)| (t, e)).collect();
    let series = [
        Series { name: "sent".into(), points: per_second(&sent) },
        Series { name: "echoed".into(), points: per_second(&echoed) },
    ];
    load(path, &format!("udp-load -> {target}"), "datagrams/s", &series, &r.rtt_log2_us)
}

/// `http-load --plot`: responses/s per worker, latency distribution.
pub fn http_load(path: &Path, r: &rsskit_runtime::http::load::LoadReport) -> Result<()> {
    let mut per = r.per_second.clone();
    if per.last().is_none_or(|l| l.0 < r.elapsed_s) {
        per.push((r.elapsed_s, r.workers.iter().map(|w| w.responses).collect()));
    }
    let series: Vec<Series> = r
        .workers
        .iter()
        .enumerate()
        .map(|(i, w)| {
            let totals: Vec<(f64, u64)> =
                per.iter().map(|(t, v)| (*t, v.get(i).copied().unwrap_or(0))).collect();
            Series { name: format!("worker {} (CPU {})", w.worker.0, w.cpu.0), points: per_second(&totals) }
        })
        .collect();
    let mut latency = rsskit_runtime::http::hist::Latency::new();
    for w in &r.workers {
        latency.merge(&w.latency);
    }
    load(path, &format!("http-load {}", r.url), "responses/s", &series, &latency.log2_buckets())
}

fn draw_lines(root: &Area, title: &str, x_label: &str, y_label: &str, series: &[Series]) -> DrawResult {
    let (x0, x1) = range(series.iter().flat_map(|s| s.points.iter().map(|p| p.0)));
    let (_, y1) = range(series.iter().flat_map(|s| s.points.iter().map(|p| p.1)).chain([0.0]));
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
    if !series.is_empty() {
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .position(SeriesLabelPosition::UpperRight)
            .draw()?;
    }
    Ok(())
}

/// Bars on a log2 axis of latency.
fn draw_latency(root: &Area, title: &str, buckets: &[(f64, u64)]) -> DrawResult {
    let pts: Vec<(f64, f64)> =
        buckets.iter().filter(|b| b.0 > 0.0 && b.1 > 0).map(|&(us, n)| (us.log2(), n as f64)).collect();
    let (x0, x1) = range(pts.iter().map(|p| p.0));
    let (_, y1) = range(pts.iter().map(|p| p.1).chain([0.0]));
    let mut chart = ChartBuilder::on(root)
        .caption(title, ("sans-serif", 22))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(80)
        .build_cartesian_2d((x0 - 0.5)..(x1 + 0.5), 0.0..y1 * 1.05)?;
    chart
        .configure_mesh()
        .x_desc("latency up to (µs, log scale)")
        .y_desc("count")
        .x_label_formatter(&|x| format!("{:.0}", x.exp2()))
        .draw()?;
    chart.draw_series(
        pts.iter().map(|&(x, y)| Rectangle::new([(x - 0.4, 0.0), (x + 0.4, y)], BLUE.mix(0.6).filled())),
    )?;
    Ok(())
}

fn write(path: &Path, size: (u32, u32), f: impl FnOnce(&Area) -> DrawResult) -> Result<()> {
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, size).into_drawing_area();
        root.fill(&WHITE).map_err(|e| anyhow!("drawing the plot: {e}"))?;
        f(&root).map_err(|e| anyhow!("drawing the plot: {e}"))?;
        root.present().map_err(|e| anyhow!("drawing the plot: {e}"))?;
    }
    let mut file = open_plot(path, true).with_context(|| format!("--plot: writing {}", path.display()))?;
    file.set_len(0)
        .and_then(|()| file.write_all(svg.as_bytes()))
        .with_context(|| format!("--plot: writing {}", path.display()))
}

/// Opens the plot file for writing as root may in a shared directory:
/// never through a symlink (`O_NOFOLLOW`), only a regular file with one
/// link, not truncated here (the caller truncates once it has the chart).
/// `create`: create it (mode 0644) when missing, else it must not exist
/// (`O_EXCL`) or must be such a file.
fn open_plot(path: &Path, create: bool) -> std::io::Result<File> {
    let mut o = OpenOptions::new();
    o.write(true).custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC).mode(0o644);
    if create {
        o.create(true);
    }
    let f = o.open(path).map_err(|e| match e.raw_os_error() {
        Some(libc::ELOOP) => std::io::Error::other("it is a symlink; name the file itself"),
        _ => e,
    })?;
    let m = f.metadata()?;
    if !m.file_type().is_file() {
        return Err(std::io::Error::other("not a regular file"));
    }
    if m.nlink() > 1 {
        return Err(std::io::Error::other("it has other hard links; name a file of its own"));
    }
    Ok(f)
}

/// `--plot FILE`, checked while the arguments are parsed, so a typo fails
/// before a long run (clap's usage error, exit 2) instead of losing its
/// data at the end: the directory must exist, and the file must be one
/// rsskit may write ([`open_plot`]). A missing file is created and removed
/// again at once: nothing is left behind if the run then fails, and an
/// existing chart is only replaced when the new one is written.
pub fn path_arg(s: &str) -> std::result::Result<PathBuf, String> {
    let path = PathBuf::from(s);
    if s.is_empty() || s.ends_with('/') {
        return Err("a file name is needed".into());
    }
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    if !dir.is_dir() {
        return Err(format!("{}: the directory {} does not exist", path.display(), dir.display()));
    }
    let fail = |e: std::io::Error| format!("{}: cannot write it: {e}", path.display());
    match std::fs::symlink_metadata(&path) {
        Ok(_) => open_plot(&path, false).map(drop).map_err(fail)?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let created = OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o644)
                .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
                .open(&path)
                .map_err(fail)?;
            drop(created);
            std::fs::remove_file(&path).map_err(fail)?;
        }
        Err(e) => return Err(fail(e)),
    }
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn per_second_from_totals() {
        assert_eq!(
            per_second(&[(1.0, 100), (2.0, 300), (2.0, 300), (4.0, 300)]),
            vec![(1.0, 100.0), (2.0, 200.0), (4.0, 0.0)]
        );
    }

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
        load(&p, "lat", "pps", &s, &[(1.0, 3), (2.0, 10), (64.0, 1)]).unwrap();
        let t = std::fs::read_to_string(&p).unwrap();
        assert!(t.matches("<rect").count() > 3, "background and 3 bars: {t}");
        assert!(t.contains("latency distribution") && t.contains("cpu0"), "{t}");
        load(&p, "lat", "pps", &[], &[]).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
