//! `gen bench --plot FILE.svg`: output tok/s against concurrency, one line per server.
//!
//! SVG only: the backend writes text as `<text>` elements, so no font files or system
//! libraries are needed.

use std::path::Path;

use anyhow::Context as _;
use plotters::prelude::*;

use super::report::Report;

const SIZE: (u32, u32) = (800, 480);

/// Renders the report's throughput curves as an SVG document.
pub fn svg(report: &Report) -> anyhow::Result<String> {
    let mut text = String::new();
    {
        let root = SVGBackend::with_string(&mut text, SIZE).into_drawing_area();
        draw(&root, report).map_err(|e| anyhow::anyhow!("failed to draw the plot: {e}"))?;
        root.present()
            .map_err(|e| anyhow::anyhow!("failed to draw the plot: {e}"))?;
    }
    Ok(text)
}

/// Writes the plot to `path`.
pub fn write(report: &Report, path: &Path) -> anyhow::Result<()> {
    let text = svg(report)?;
    fs_err::write(path, text)
        .with_context(|| format!("failed to write the plot `{}`", path.display()))
}

fn draw<DB: DrawingBackend>(
    root: &DrawingArea<DB, plotters::coord::Shift>,
    report: &Report,
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    root.fill(&WHITE)?;
    let points: Vec<Vec<(f64, f64)>> = report
        .servers
        .iter()
        .map(|server| {
            server
                .levels
                .iter()
                .filter(|l| l.completed > 0)
                .map(|l| (l.concurrency as f64, l.output_tokens_per_s))
                .collect()
        })
        .collect();
    let max_level = points.iter().flatten().map(|p| p.0).fold(2.0_f64, f64::max);
    let max_rate = points.iter().flatten().map(|p| p.1).fold(1.0_f64, f64::max);
    let mut chart = ChartBuilder::on(root)
        .caption("gen bench: output tok/s vs concurrency", ("sans-serif", 22))
        .margin(20)
        .x_label_area_size(45)
        .y_label_area_size(70)
        .build_cartesian_2d((1.0..max_level * 1.1).log_scale(), 0.0..max_rate * 1.1)?;
    chart
        .configure_mesh()
        .x_desc("concurrency (requests in flight)")
        .y_desc("output tok/s")
        .x_label_formatter(&|x| format!("{x:.0}"))
        .y_label_formatter(&|y| format!("{y:.decimals$}", decimals = decimals(max_rate * 1.1)))
        .draw()?;
    for (index, (server, line)) in report.servers.iter().zip(&points).enumerate() {
        let color = Palette99::pick(index).to_rgba();
        chart
            .draw_series(LineSeries::new(line.iter().copied(), color.stroke_width(2)))?
            .label(format!(
                "{} {} ({})",
                server.label, server.url, server.model
            ))
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
            });
        chart.draw_series(
            line.iter()
                .map(|&point| Circle::new(point, 4, color.filled())),
        )?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()?;
    Ok(())
}

/// Decimals for the labels of an axis from 0 to `top`: enough that ten steps read apart
/// (`0.5 1.0 1.5`, not `0 1 1 2`), none when a step is a whole number or more.
fn decimals(top: f64) -> usize {
    let step = top / 10.0;
    if !step.is_finite() || step <= 0.0 || step >= 1.0 {
        return 0;
    }
    (-step.log10()).ceil() as usize
}

#[cfg(test)]
mod tests {
    use super::decimals;

    /// A sweep at a few tok/s gets labels that differ, not `4 4 4 3 2 2 2 1 0 0`.
    #[test]
    fn labels_of_a_small_axis_read_apart() {
        for top in [4.84, 0.37, 0.05, 12.0, 4800.0] {
            let places = decimals(top);
            let labels: Vec<String> = (0..10)
                .map(|i| format!("{:.places$}", top * f64::from(i) / 10.0))
                .collect();
            let mut distinct = labels.clone();
            distinct.dedup();
            assert_eq!(distinct.len(), labels.len(), "{top}: {labels:?}");
        }
        assert_eq!(decimals(4800.0), 0);
        assert_eq!(decimals(4.84), 1);
    }
}
