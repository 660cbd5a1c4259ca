//! A sweep's rows: one flat JSON object a run, its fields in a fixed order
//! (the run's place in the grid, each parameter, every input, the metrics,
//! the chosen counters), and the same rows as CSV.
//!
//! A row is a function of its point and its run's output only, so the
//! same sweep gives the same bytes whichever host thread, process or Ray
//! worker ran each run, and in whatever order.

use serde::de::{Deserialize, Deserializer, MapAccess, Visitor};
use serde_json::Value;

use super::grid::{FIXED_FIELDS, Point};
use crate::features::Features;
use crate::machine::Machine;
use crate::report::counters::counters;
use crate::report::text::{format_command, format_features};
use crate::report::units::cycles_to_ns_rounded;
use crate::sim::Event;
use crate::workload::{RunError, RunOutput};

/// A row's fields in order.
#[derive(Clone, Debug, PartialEq)]
pub struct Row(pub Vec<(String, Value)>);

/// What a row says about its run besides the point: the run's inputs as
/// `mmsim run` resolved them.
pub struct Inputs<'a> {
    pub workload: &'a str,
    pub machine: &'a Machine,
    pub features: Features,
    pub seed: u64,
}

/// mmsim's version and commit, as a row gives it.
pub fn mmsim_version() -> String {
    format!("{} {}", crate::version::VERSION, crate::version::GIT_COMMIT)
}

/// A parameter's value: a JSON number when it is written as one (`8`,
/// `0.5`), otherwise the text (`0x200000`, `on`, `64M`).
fn param_value(text: &str) -> Value {
    if let Ok(n) = text.parse::<i64>()
        && n.to_string() == text
    {
        return Value::from(n);
    }
    let plain = text
        .chars()
        .all(|c| c.is_ascii_digit() || c == '.' || c == '-');
    match text.parse::<f64>() {
        Ok(x) if plain && x.is_finite() => Value::from(x),
        _ => Value::from(text),
    }
}

/// The row of one run.
pub fn row(
    point: &Point,
    inputs: &Inputs,
    counters_chosen: &[Event],
    output: &Result<RunOutput, RunError>,
) -> Row {
    let mut fields: Vec<(String, Value)> = vec![("run".into(), Value::from(point.index))];
    for (param, value) in &point.params {
        fields.push((param.clone(), param_value(value)));
    }
    let machine = inputs.machine;
    let overrides: Vec<String> = machine
        .overrides
        .iter()
        .map(|o| format!("{}={}", o.key, o.value))
        .collect();
    fields.extend([
        (
            "command".into(),
            Value::from(format_command(&point.args[0], &point.args[1..])),
        ),
        ("workload".into(), Value::from(inputs.workload)),
        ("machine".into(), Value::from(machine.display_name())),
        ("machine_digest".into(), Value::from(machine.digest())),
        ("seed".into(), Value::from(inputs.seed)),
        (
            "kernel".into(),
            Value::from(format_features(inputs.features, machine.arch)),
        ),
        ("overrides".into(), Value::from(overrides.join(" "))),
        ("mmsim".into(), Value::from(mmsim_version())),
    ]);
    // A parameter named `seed` is also the fixed field: keep one.
    let mut seen = std::collections::BTreeSet::new();
    fields.retain(|(k, _)| seen.insert(k.clone()));
    match output {
        Ok(run) => {
            push_new(
                &mut fields,
                "elapsed_ns",
                Value::from(cycles_to_ns_rounded(&machine.topology, run.elapsed)),
            );
            for metric in &run.metrics {
                let value = if metric.value.is_nan() {
                    Value::Null
                } else {
                    Value::from(metric.value)
                };
                push_new(&mut fields, &metric.name, value);
            }
            let all = counters(&run.stats);
            for &event in counters_chosen {
                let value = all.iter().find(|(e, _)| *e == event).map_or(0, |c| c.1);
                push_new(&mut fields, event.name(), Value::from(value));
            }
        }
        Err(e) => push_new(&mut fields, "error", Value::from(e.to_string())),
    }
    Row(fields)
}

/// Adds a field unless one of that name is there (a metric named like a
/// parameter keeps the parameter's: the row says what was asked for).
fn push_new(fields: &mut Vec<(String, Value)>, key: &str, value: Value) {
    if !fields.iter().any(|(k, _)| k == key) {
        fields.push((key.to_string(), value));
    }
}

impl Row {
    /// The row as one line of JSON, without a newline.
    pub fn to_line(&self) -> String {
        let fields: Vec<String> = self
            .0
            .iter()
            .map(|(k, v)| format!("{}:{}", Value::from(k.as_str()), v))
            .collect();
        format!("{{{}}}", fields.join(","))
    }

    /// A row read back from its line, its fields in the line's order.
    pub fn from_line(line: &str) -> Option<Row> {
        serde_json::from_str::<Row>(line).ok()
    }

    pub fn get(&self, key: &str) -> Option<&Value> {
        self.0.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }

    /// The metrics' names: the fields that are no parameter, fixed field
    /// or counter.
    pub fn metric_names<'a>(&'a self, params: &[String], counters: &[Event]) -> Vec<&'a str> {
        self.0
            .iter()
            .map(|(k, _)| k.as_str())
            .filter(|k| {
                !FIXED_FIELDS.contains(k)
                    && !params.iter().any(|p| p == k)
                    && !counters.iter().any(|c| c.name() == *k)
            })
            .collect()
    }
}

impl<'de> Deserialize<'de> for Row {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Row, D::Error> {
        struct Fields;
        impl<'de> Visitor<'de> for Fields {
            type Value = Row;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Row, A::Error> {
                let mut fields = Vec::new();
                while let Some((k, v)) = map.next_entry::<String, Value>()? {
                    fields.push((k, v));
                }
                Ok(Row(fields))
            }
        }
        deserializer.deserialize_map(Fields)
    }
}

/// The rows as CSV: a header of every field name in order of first
/// appearance, then one line a row (an absent field empty).
pub fn to_csv(rows: &[Row]) -> String {
    let mut header: Vec<&str> = Vec::new();
    for row in rows {
        for (k, _) in &row.0 {
            if !header.contains(&k.as_str()) {
                header.push(k);
            }
        }
    }
    let mut out = header
        .iter()
        .map(|h| csv_field(h))
        .collect::<Vec<_>>()
        .join(",");
    out.push('\n');
    for row in rows {
        let cells: Vec<String> = header
            .iter()
            .map(|h| match row.get(h) {
                None | Some(Value::Null) => String::new(),
                Some(Value::String(s)) => csv_field(s),
                Some(v) => v.to_string(),
            })
            .collect();
        out.push_str(&cells.join(","));
        out.push('\n');
    }
    out
}

/// A CSV field, quoted when it holds a comma, a quote or a line break
/// (RFC 4180).
fn csv_field(text: &str) -> String {
    if text.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", text.replace('"', "\"\""))
    } else {
        text.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_reads_back_as_the_same_row() {
        let row = Row(vec![
            ("run".into(), Value::from(3)),
            ("n".into(), Value::from(8)),
            ("command".into(), Value::from("usemem -n 8 1M")),
            ("throughput".into(), Value::from(1.5)),
            ("missing".into(), Value::Null),
        ]);
        let line = row.to_line();
        assert_eq!(
            line,
            r#"{"run":3,"n":8,"command":"usemem -n 8 1M","throughput":1.5,"missing":null}"#
        );
        assert_eq!(Row::from_line(&line), Some(row));
        assert_eq!(Row::from_line("{\"run\":3,"), None);
    }

    #[test]
    fn parameters_are_numbers_when_written_as_numbers() {
        assert_eq!(param_value("72"), Value::from(72));
        assert_eq!(param_value("0.5"), Value::from(0.5));
        assert_eq!(param_value("0x200000"), Value::from("0x200000"));
        assert_eq!(param_value("on"), Value::from("on"));
        assert_eq!(param_value("64M"), Value::from("64M"));
        assert_eq!(param_value("007"), Value::from(7.0));
    }

    #[test]
    fn csv_has_every_field_and_quotes_where_needed() {
        let rows = [
            Row(vec![
                ("run".into(), Value::from(0)),
                ("kernel".into(), Value::from("a=on, b")),
            ]),
            Row(vec![
                ("run".into(), Value::from(1)),
                ("error".into(), Value::from("say \"no\"")),
            ]),
        ];
        assert_eq!(
            to_csv(&rows),
            "run,kernel,error\n0,\"a=on, b\",\n1,,\"say \"\"no\"\"\"\n"
        );
    }
}
