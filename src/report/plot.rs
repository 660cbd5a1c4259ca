//! Line charts as SVG: a metric against a parameter, one line per setting
//! of the others, in the manner of LKP's scaling plots (`mmsim sweep
//! --plot`).
//!
//! Drawn with `plotters`' SVG backend and no font library: text is placed
//! from plotters' own size estimate and drawn by the SVG viewer, so the
//! same series give the same bytes on every host.

use plotters::prelude::*;

/// One line of a chart: its label and its points, in the order drawn.
#[derive(Clone, Debug, PartialEq)]
pub struct Series {
    pub label: String,
    pub points: Vec<(f64, f64)>,
}

/// A chart's texts.
#[derive(Clone, Debug)]
pub struct Chart<'a> {
    pub title: &'a str,
    pub x_label: &'a str,
    pub y_label: &'a str,
}

/// The size of the picture, in pixels.
const WIDTH: u32 = 900;
const HEIGHT: u32 = 560;

/// Colours of the lines in order (the first two: before and after).
const COLOURS: [RGBColor; 8] = [
    RGBColor(0xd6, 0x27, 0x28),
    RGBColor(0x1f, 0x77, 0xb4),
    RGBColor(0x2c, 0xa0, 0x2c),
    RGBColor(0xff, 0x7f, 0x0e),
    RGBColor(0x94, 0x67, 0xbd),
    RGBColor(0x8c, 0x56, 0x4b),
    RGBColor(0xe3, 0x77, 0xc2),
    RGBColor(0x7f, 0x7f, 0x7f),
];

/// The chart as an SVG document. The y axis starts at 0 (a scaling plot
/// reads as ratios); both axes reach 5% past the largest value.
pub fn line_chart_svg(chart: &Chart, series: &[Series]) -> Result<String, String> {
    let points = || series.iter().flat_map(|s| s.points.iter());
    if points().next().is_none() {
        return Err("nothing to plot: no point has a value".to_string());
    }
    let x_min = points().map(|p| p.0).fold(f64::INFINITY, f64::min);
    let x_max = points().map(|p| p.0).fold(f64::NEG_INFINITY, f64::max);
    let y_max = points().map(|p| p.1).fold(0.0, f64::max);
    let x_pad = ((x_max - x_min) * 0.05).max(0.5);
    let x_range = (x_min.min(0.0))..(x_max + x_pad);
    let y_range = 0.0..(if y_max > 0.0 { y_max * 1.05 } else { 1.0 });
    let mut svg = String::new();
    draw(&mut svg, chart, series, x_range, y_range).map_err(|e| format!("plot: {e}"))?;
    svg.push('\n');
    Ok(svg)
}

fn draw(
    svg: &mut String,
    chart: &Chart,
    series: &[Series],
    x_range: std::ops::Range<f64>,
    y_range: std::ops::Range<f64>,
) -> Result<(), Box<dyn std::error::Error>> {
    let root = SVGBackend::with_string(svg, (WIDTH, HEIGHT)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut ctx = ChartBuilder::on(&root)
        .caption(chart.title, ("sans-serif", 20))
        .margin(16)
        .x_label_area_size(44)
        .y_label_area_size(90)
        .build_cartesian_2d(x_range, y_range)?;
    ctx.configure_mesh()
        .x_desc(chart.x_label)
        .y_desc(chart.y_label)
        .y_label_formatter(&|v| format_tick(*v))
        .x_label_formatter(&|v| format_tick(*v))
        .draw()?;
    for (i, s) in series.iter().enumerate() {
        let colour = COLOURS[i % COLOURS.len()];
        ctx.draw_series(LineSeries::new(
            s.points.iter().copied(),
            colour.stroke_width(2),
        ))?
        .label(s.label.as_str())
        .legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], colour.stroke_width(2)));
        ctx.draw_series(s.points.iter().map(|&p| Circle::new(p, 4, colour.filled())))?;
    }
    ctx.configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()?;
    root.present()?;
    Ok(())
}

/// A tick label: integers as they are, large values with a metric suffix
/// (`4.7G`), small ones with up to three decimals.
fn format_tick(v: f64) -> String {
    let a = v.abs();
    let (scaled, suffix) = if a >= 1e12 {
        (v / 1e12, "T")
    } else if a >= 1e9 {
        (v / 1e9, "G")
    } else if a >= 1e6 {
        (v / 1e6, "M")
    } else if a >= 1e4 {
        (v / 1e3, "k")
    } else {
        (v, "")
    };
    let text = format!("{scaled:.3}");
    let text = text.trim_end_matches('0').trim_end_matches('.');
    format!("{text}{suffix}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chart() -> Chart<'static> {
        Chart {
            title: "t",
            x_label: "n",
            y_label: "throughput",
        }
    }

    #[test]
    fn a_chart_has_one_path_per_series_and_its_legend() {
        let series = [
            Series {
                label: "change=off".into(),
                points: vec![(1.0, 10.0), (2.0, 12.0), (4.0, 13.0)],
            },
            Series {
                label: "change=on".into(),
                points: vec![(1.0, 10.0), (2.0, 20.0), (4.0, 40.0)],
            },
        ];
        let svg = line_chart_svg(&chart(), &series).unwrap();
        assert!(svg.starts_with("<svg"), "{svg}");
        assert!(svg.contains("\nchange=off\n</text>"), "{svg}");
        assert!(svg.contains("\nchange=on\n</text>"), "{svg}");
        assert_eq!(svg.matches("<circle").count(), 6);
        // The same series give the same bytes.
        assert_eq!(svg, line_chart_svg(&chart(), &series).unwrap());
    }

    #[test]
    fn nothing_to_plot_is_an_error() {
        let empty = [Series {
            label: "x".into(),
            points: vec![],
        }];
        assert_eq!(
            line_chart_svg(&chart(), &empty).unwrap_err(),
            "nothing to plot: no point has a value"
        );
    }

    #[test]
    fn ticks_are_short() {
        assert_eq!(format_tick(4_726_928_591.0), "4.727G");
        assert_eq!(format_tick(36.0), "36");
        assert_eq!(format_tick(0.25), "0.25");
        assert_eq!(format_tick(12_000.0), "12k");
    }
}
