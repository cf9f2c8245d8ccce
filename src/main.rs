//! `applyset-operator` — the thin binary over the library.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "applyset-operator",
    version,
    about = "Reconciles ApplySet and ClusterApplySet resources"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Print both CRDs as YAML.
    Crd,
}

fn main() -> ExitCode {
    match Cli::parse().command {
        Command::Crd => match applyset_operator::api::crds_yaml() {
            Ok(yaml) => {
                print!("{yaml}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("error: {e}");
                ExitCode::FAILURE
            }
        },
    }
}
