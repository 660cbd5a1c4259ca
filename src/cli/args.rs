//! Picking mmsim's own long options out of a command line.
//!
//! Options are long only (`--machine M` or `--machine=M`) and may appear
//! anywhere after the command's positional arguments begin; whatever is not
//! one of the command's options is handed back in order, for the command's
//! positionals or the workload's own parser. `--` ends option parsing:
//! everything after it is handed back verbatim.

use super::CliError;
use crate::features::Feature;
use crate::util::escape;

/// One long option a command accepts.
#[derive(Clone, Copy, Debug)]
pub struct Opt {
    /// Without the leading dashes.
    pub name: &'static str,
    pub takes_value: bool,
}

impl Opt {
    pub const fn value(name: &'static str) -> Opt {
        Opt {
            name,
            takes_value: true,
        }
    }

    pub const fn switch(name: &'static str) -> Opt {
        Opt {
            name,
            takes_value: false,
        }
    }
}

/// The options found, in the order given, and everything else.
#[derive(Debug, Default)]
pub struct Parsed {
    found: Vec<(&'static str, Option<String>)>,
    pub rest: Vec<String>,
}

impl Parsed {
    /// The last value given for a valued option (later ones win, so a
    /// script can append an override).
    pub fn last(&self, name: &str) -> Option<&str> {
        self.found
            .iter()
            .rev()
            .find(|(n, _)| *n == name)
            .and_then(|(_, v)| v.as_deref())
    }

    /// Every option in the order given, with its value.
    pub fn all(&self) -> impl Iterator<Item = (&'static str, Option<&str>)> {
        self.found.iter().map(|(n, v)| (*n, v.as_deref()))
    }

    pub fn has(&self, name: &str) -> bool {
        self.found.iter().any(|(n, _)| *n == name)
    }
}

/// Splits `args` into the options in `opts` and the rest.
pub fn extract(args: &[String], opts: &[Opt]) -> Result<Parsed, CliError> {
    let mut parsed = Parsed::default();
    let mut i = 0;
    while i < args.len() {
        let arg = &args[i];
        i += 1;
        if arg == "--" {
            parsed.rest.extend(args[i..].iter().cloned());
            break;
        }
        let Some(body) = arg.strip_prefix("--") else {
            parsed.rest.push(arg.clone());
            continue;
        };
        let (name, inline) = match body.split_once('=') {
            Some((name, value)) => (name, Some(value.to_string())),
            None => (body, None),
        };
        let Some(opt) = opts.iter().find(|o| o.name == name) else {
            parsed.rest.push(arg.clone());
            continue;
        };
        let value = match (opt.takes_value, inline) {
            (false, None) => None,
            // `--memcg=1G` asks for a limit the model does not have.
            (false, Some(_)) if name == "memcg" => {
                return Err(CliError::new(
                    "--memcg takes no value: its cgroup has no limit (memory.max, memory.high and memcg reclaim are not modelled)",
                ));
            }
            (false, Some(_)) => {
                return Err(CliError::new(format!("--{} takes no value", escape(name))));
            }
            (true, Some(value)) => Some(value),
            (true, None) => {
                let value = args.get(i).filter(|v| !v.starts_with("--"));
                let value =
                    value.ok_or_else(|| CliError::new(format!("missing value for --{name}")))?;
                i += 1;
                Some(value.clone())
            }
        };
        parsed.found.push((opt.name, value));
    }
    Ok(parsed)
}

/// Rejects anything left over that looks like an option, for commands that
/// take no options beyond their own.
pub fn no_unknown_options(parsed: &Parsed, command: &str) -> Result<(), CliError> {
    match parsed
        .rest
        .iter()
        .find(|a| a.starts_with('-') && a.len() > 1)
    {
        Some(arg) => Err(CliError::new(format!(
            "unknown option '{}' for 'mmsim {command}' (see 'mmsim help {command}')",
            escape(arg)
        ))),
        None => Ok(()),
    }
}

/// A seed: decimal, or hexadecimal with `0x`.
pub fn parse_seed(text: &str) -> Result<u64, CliError> {
    let parsed = match text.strip_prefix("0x").or_else(|| text.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => text.parse::<u64>(),
    };
    parsed.map_err(|_| {
        CliError::new(format!(
            "invalid seed '{}': expected an integer from 0 to {} (or 0x hex)",
            escape(text),
            u64::MAX
        ))
    })
}

/// How many profile lines to show: a positive integer.
pub fn parse_top(text: &str) -> Result<usize, CliError> {
    match text.parse::<usize>() {
        Ok(n) if n > 0 => Ok(n),
        _ => Err(CliError::new(format!(
            "invalid --top '{}': expected a positive integer",
            escape(text)
        ))),
    }
}

/// A feature by name, or an error listing them all.
pub fn parse_feature(text: &str) -> Result<Feature, CliError> {
    Feature::from_name(text).ok_or_else(|| {
        let names: Vec<&str> = Feature::ALL.iter().map(|f| f.name()).collect();
        CliError::new(format!(
            "unknown feature '{}' (features: {})",
            escape(text),
            names.join(", ")
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const OPTS: &[Opt] = &[Opt::value("machine"), Opt::switch("json")];

    fn strings(args: &[&str]) -> Vec<String> {
        args.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn options_anywhere_the_rest_in_order() {
        let p = extract(
            &strings(&["-n", "4", "--json", "--machine", "m1", "x", "--other"]),
            OPTS,
        )
        .unwrap();
        assert_eq!(p.rest, strings(&["-n", "4", "x", "--other"]));
        assert_eq!(p.last("machine"), Some("m1"));
        assert!(p.has("json"));
    }

    #[test]
    fn equals_form_and_last_one_wins() {
        let p = extract(&strings(&["--machine=a", "--machine", "b"]), OPTS).unwrap();
        assert_eq!(p.last("machine"), Some("b"));
        assert_eq!(p.all().count(), 2);
    }

    #[test]
    fn double_dash_hands_everything_after_it_back() {
        let p = extract(&strings(&["--json", "--", "--machine", "x"]), OPTS).unwrap();
        assert_eq!(p.rest, strings(&["--machine", "x"]));
        assert_eq!(p.last("machine"), None);
    }

    #[test]
    fn a_missing_value_is_an_error() {
        let e = extract(&strings(&["--machine"]), OPTS).unwrap_err();
        assert_eq!(e.to_string(), "missing value for --machine");
        let e = extract(&strings(&["--machine", "--json"]), OPTS).unwrap_err();
        assert_eq!(e.to_string(), "missing value for --machine");
        let e = extract(&strings(&["--json=1"]), OPTS).unwrap_err();
        assert_eq!(e.to_string(), "--json takes no value");
    }

    #[test]
    fn an_empty_inline_value_is_kept_for_the_caller_to_judge() {
        let p = extract(&strings(&["--machine="]), OPTS).unwrap();
        assert_eq!(p.last("machine"), Some(""));
    }

    #[test]
    fn seeds() {
        assert_eq!(parse_seed("42").unwrap(), 42);
        assert_eq!(parse_seed("0x10").unwrap(), 16);
        assert!(parse_seed("-1").is_err());
        assert!(
            parse_seed("abc")
                .unwrap_err()
                .to_string()
                .starts_with("invalid seed 'abc'")
        );
        assert!(parse_seed("18446744073709551616").is_err());
    }

    #[test]
    fn top_must_be_positive() {
        assert_eq!(parse_top("5").unwrap(), 5);
        assert!(parse_top("0").is_err());
        assert!(parse_top("x").is_err());
    }

    #[test]
    fn features_by_name() {
        assert_eq!(
            parse_feature("pcp-high-order").unwrap(),
            Feature::PcpHighOrder
        );
        let e = parse_feature("nope").unwrap_err().to_string();
        assert!(
            e.starts_with("unknown feature 'nope' (features: pcp-high-order"),
            "{e}"
        );
    }
}
