//! `mmsim explore`: the command line of [`crate::explore`].

use super::CliError;
use super::args::{Opt, extract, no_unknown_options, parse_seed};
use crate::explore::memory::Memory;
use crate::explore::{self, Config, Protocol, Search};
use crate::util::escape;

const OPTIONS: &[Opt] = &[
    Opt::switch("list"),
    Opt::switch("barriers"),
    Opt::switch("no-barriers"),
    Opt::value("memory"),
    Opt::value("walkers"),
    Opt::value("seqnum-bits"),
    Opt::switch("exhaustive"),
    Opt::value("max-states"),
    Opt::value("seed"),
    Opt::value("schedules"),
    Opt::value("replay"),
    Opt::switch("help"),
];

pub fn explore_command(args: &[String]) -> Result<String, CliError> {
    let parsed = extract(args, OPTIONS)?;
    no_unknown_options(&parsed, "explore")?;
    if parsed.has("help") {
        return Ok(super::help::EXPLORE.to_string());
    }
    if parsed.has("list") {
        if let Some(extra) = parsed.rest.first() {
            return Err(CliError::new(format!(
                "unexpected argument '{}' with --list",
                escape(extra)
            )));
        }
        return Ok(explore::list());
    }
    let name = match parsed.rest.as_slice() {
        [name] => name,
        [] => {
            return Err(CliError::new(
                "no protocol given (see 'mmsim explore --list')",
            ));
        }
        [_, extra, ..] => {
            return Err(CliError::new(format!(
                "unexpected argument '{}' after the protocol",
                escape(extra)
            )));
        }
    };
    let protocol = Protocol::by_name(name).ok_or_else(|| {
        let names: Vec<&str> = explore::PROTOCOLS.iter().map(|p| p.name).collect();
        CliError::new(format!(
            "unknown protocol '{}' (protocols: {})",
            escape(name),
            names.join(", ")
        ))
    })?;
    let mut config = Config::new(protocol);
    for (option, _) in parsed.all() {
        let walk_only = matches!(option, "barriers" | "no-barriers" | "memory" | "walkers");
        if walk_only && !protocol.is_walk() {
            return Err(CliError::new(format!(
                "--{option} does not apply to {} (a race of logic over system calls, not of memory order)",
                protocol.name
            )));
        }
        if option == "seqnum-bits" && protocol.is_walk() {
            return Err(CliError::new(format!(
                "--seqnum-bits applies to the vmacache protocols, not {}",
                protocol.name
            )));
        }
        match option {
            "barriers" => config.barriers = true,
            "no-barriers" => config.barriers = false,
            _ => {}
        }
    }
    if let Some(memory) = parsed.last("memory") {
        config.memory = Memory::from_name(memory).ok_or_else(|| {
            CliError::new(format!(
                "invalid --memory '{}': expected x86 or power",
                escape(memory)
            ))
        })?;
    }
    if let Some(walkers) = parsed.last("walkers") {
        config.walkers = number("--walkers", walkers, 1, explore::MAX_WALKERS as u64)? as usize;
    }
    if let Some(bits) = parsed.last("seqnum-bits") {
        config.seqnum_bits = number(
            "--seqnum-bits",
            bits,
            1,
            u64::from(explore::MAX_SEQNUM_BITS),
        )? as u32;
    }
    let max_states = match parsed.last("max-states") {
        Some(text) => number("--max-states", text, 1, 10_000_000)? as usize,
        None => explore::DEFAULT_MAX_STATES,
    };
    let seed = parsed.last("seed").map(parse_seed).transpose()?;
    let schedules = parsed
        .last("schedules")
        .map(|text| number("--schedules", text, 1, 100_000_000))
        .transpose()?;
    let random = seed.is_some() || schedules.is_some();
    if let Some(list) = parsed.last("replay") {
        if random || parsed.has("exhaustive") {
            return Err(CliError::new(
                "--replay runs one schedule: it takes no --exhaustive, --seed or --schedules",
            ));
        }
        let tokens: Vec<String> = list
            .split(',')
            .map(|t| t.trim().to_string())
            .filter(|t| !t.is_empty())
            .collect();
        return explore::replay(&config, &tokens)
            .map_err(|e| CliError::new(format!("--replay: {e}")));
    }
    let how = match (parsed.has("exhaustive"), random) {
        (true, true) => {
            return Err(CliError::new(
                "--exhaustive searches every schedule: it takes no --seed or --schedules",
            ));
        }
        (true, false) => Search::Exhaustive { max_states },
        (false, true) => Search::Random {
            seed: seed.unwrap_or(explore::DEFAULT_SEED),
            schedules: schedules.unwrap_or(explore::DEFAULT_SCHEDULES),
        },
        (false, false) => Search::Auto {
            max_states,
            seed: explore::DEFAULT_SEED,
            schedules: explore::DEFAULT_SCHEDULES,
        },
    };
    explore::report(&config, how).map_err(CliError::new)
}

/// An integer from `min` to `max`.
fn number(option: &str, text: &str, min: u64, max: u64) -> Result<u64, CliError> {
    match text.parse::<u64>() {
        Ok(n) if (min..=max).contains(&n) => Ok(n),
        _ => Err(CliError::new(format!(
            "invalid {option} '{}': expected an integer from {min} to {max}",
            escape(text)
        ))),
    }
}
