//! `flexgate`: the demand-response gateway between the power grid and AI training clusters.
//!
//! This binary only wires things together: argument parsing, files, terminal output. The
//! decisions live in the `flexgate-policies` crate.

use clap::{Parser, Subcommand};
use flexgate::commands;
use std::process::ExitCode;

/// flexgate turns utility curtailment events into per-job GPU power caps, cutting the jobs
/// that lose the least throughput per watt first.
///
/// Start with `flexgate demo`: a gateway and a simulated GPU cluster in one process, a real
/// curtailment event through the HTTP API, and the audit, in about 30 seconds. Then `flexgate
/// run` serves the gateway, and `flexgate simulate` compares our allocator with the paper's
/// rules and the oracle on the fleet experiment of Colangelo et al.
#[derive(Debug, Parser)]
#[command(name = "flexgate", version, propagate_version = true, max_term_width = 100)]
struct Cli {
    #[command(subcommand)]
    command: Command,

    #[command(flatten)]
    log: flexgate_logging::LogArgs,
}

/// The commands; each one's help text lives on its argument struct.
#[derive(Debug, Subcommand)]
enum Command {
    Run(commands::run::RunArgs),
    Demo(commands::demo::DemoArgs),
    Audit(commands::audit::AuditArgs),
    Baseline(commands::baseline::BaselineArgs),
    Log(commands::log::LogArgs),
    Meter(commands::meter::MeterArgs),
    Openadr(commands::openadr::OpenAdrArgs),
    Simulate(commands::simulate::SimulateArgs),
    Pfi(commands::pfi::PfiArgs),
    Profiles(commands::profiles::ProfilesArgs),
    Predictor(commands::predictor::PredictorArgs),
    Facility(commands::facility::FacilityArgs),
    Openapi(commands::openapi::OpenApiArgs),
    Ha(commands::ha::HaArgs),
    Settlement(commands::settlement::SettlementArgs),
    Forecast(commands::forecast::ForecastArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Run(args) => commands::run::run(&args, cli.log.log_format),
        Command::Demo(args) => commands::demo::run(&args),
        Command::Audit(args) => commands::audit::run(&args),
        Command::Baseline(args) => commands::baseline::run(&args),
        Command::Log(args) => commands::log::run(&args),
        Command::Meter(args) => commands::meter::run(&args),
        Command::Openadr(args) => commands::openadr::run(&args),
        Command::Simulate(args) => commands::simulate::run(&args),
        Command::Pfi(args) => commands::pfi::run(&args),
        Command::Profiles(args) => commands::profiles::run(&args),
        Command::Predictor(args) => commands::predictor::run(&args),
        Command::Facility(args) => commands::facility::run(&args),
        Command::Openapi(args) => commands::openapi::run(&args),
        Command::Ha(args) => commands::ha::run(&args),
        Command::Settlement(args) => commands::settlement::run(&args),
        Command::Forecast(args) => commands::forecast::run(&args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        // The reader stopped reading (`| head`): what it wanted has been written.
        Err(error) if commands::is_closed_pipe(&error) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error:#}");
            ExitCode::FAILURE
        }
    }
}
