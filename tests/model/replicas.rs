//! The operator processes of a walk: one operator as a single replica (no `--shards`), or
//! replicas under `--shards auto` that share the walk's sets through their Leases, each with
//! a name of its own (`r0`, `r1`, ...). A replica killed and started again under its name
//! is a new incarnation of it; a replica started under a new name joins the group.

use std::path::{Path, PathBuf};

use applyset_operator::shard::assign;

use crate::{operator::TEST_LABEL, process::OperatorProcess, throttle::OPERATOR_NAMESPACE};

/// Seconds a replica's Lease is valid without renewal (`--lease-duration`): a killed
/// replica's sets move to the others within it.
pub const LEASE_SECONDS: u64 = 4;
/// The most replicas alive at once, and the most names a walk gives replicas.
pub const MAX_LIVE: usize = 4;
pub const MAX_NAMES: usize = 6;

/// How the operator runs in a walk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// One operator process, without `--shards`.
    Single,
    /// This many replicas at the start, under `--shards auto`.
    Sharded(usize),
}

impl Mode {
    /// The mode of a walk: `MODEL_REPLICAS` (`1`: a single operator; `2`, `3`: replicas)
    /// when set, else from the seed (so that a replay runs as the walk did): a single
    /// operator for one seed in three, two or three replicas for the others.
    pub fn of_seed(seed: u64) -> Mode {
        let from_env = std::env::var("MODEL_REPLICAS")
            .ok()
            .filter(|v| !v.is_empty())
            .map(|v| {
                v.parse::<usize>()
                    .unwrap_or_else(|e| panic!("MODEL_REPLICAS={v:?} is not a number: {e}"))
            });
        match from_env.unwrap_or(match seed % 3 {
            0 => 1,
            1 => 2,
            _ => 3,
        }) {
            0 | 1 => Mode::Single,
            n => Mode::Sharded(n.min(MAX_LIVE)),
        }
    }

    /// How many processes run at the start.
    pub fn initial(self) -> usize {
        match self {
            Mode::Single => 1,
            Mode::Sharded(n) => n,
        }
    }
}

/// How much of an operator's log [`Operators::holder`] reads: its first line, with room.
const LOG_HEAD: u64 = 4096;

/// The walk's operator processes, by replica index (its name is `r<index>`).
pub struct Operators {
    mode: Mode,
    kubeconfig: PathBuf,
    /// The parents' label value (the operators' `--label-selector`), also the replicas' group.
    label: String,
    /// This walk's number in the test process: walks of one seed run side by side (the
    /// reduced tests use the default walk's), and each needs log files of its own.
    walk: usize,
    /// The process of each replica, `None` while it is not running.
    processes: Vec<Option<OperatorProcess>>,
    /// Log files of every operator process of the walk.
    pub logs: Vec<PathBuf>,
}

/// The walks started so far in this test process.
static WALKS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

impl Operators {
    pub fn new(mode: Mode, kubeconfig: &Path, label: &str) -> Operators {
        Operators {
            mode,
            kubeconfig: kubeconfig.to_owned(),
            label: label.to_owned(),
            walk: WALKS.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            processes: Vec::new(),
            logs: Vec::new(),
        }
    }

    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// The name of replica `i`.
    pub fn name(i: usize) -> String {
        format!("r{i}")
    }

    /// The replica of this name, if it is one of the walk's.
    pub fn index_of(name: &str) -> Option<usize> {
        name.strip_prefix('r')?.parse().ok()
    }

    /// Starts replica `i` (restricted to this walk's parents by their label). The walk's
    /// ApplySets act as the operator and move members across namespaces, so the operator
    /// lets them (`--allow-cross-namespace-sets`): the walk is about prune, and tenancy has
    /// tests of its own (tests/tenancy.rs).
    pub fn start(&mut self, i: usize) {
        if self.processes.len() <= i {
            self.processes.resize_with(i + 1, || None);
        }
        if self.processes[i].is_some() {
            return;
        }
        let selector = format!("{TEST_LABEL}={}", self.label);
        let mut args = vec![
            "--label-selector".to_owned(),
            selector,
            "--allow-cross-namespace-sets".to_owned(),
        ];
        if let Mode::Sharded(_) = self.mode {
            args.extend(
                [
                    "--shards",
                    "auto",
                    "--shard-name",
                    &Self::name(i),
                    "--lease-duration",
                    &LEASE_SECONDS.to_string(),
                    "--leader-election-namespace",
                    OPERATOR_NAMESPACE,
                    "--leader-election-name",
                    &self.label,
                ]
                .map(str::to_owned),
            );
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let log_name = format!(
            "{}-w{}-{}-{}",
            self.label,
            self.walk,
            Self::name(i),
            self.logs.len()
        );
        let op = OperatorProcess::start(&self.kubeconfig, &args, &log_name);
        self.logs.push(op.log.clone());
        self.processes[i] = Some(op);
    }

    /// SIGKILL of replica `i`: no chance to finish anything in flight.
    pub fn kill(&mut self, i: usize) {
        if let Some(mut op) = self.processes.get_mut(i).and_then(Option::take) {
            let _ = op.child.kill();
            let _ = op.child.wait();
        }
    }

    /// The replicas running now.
    pub fn live(&self) -> Vec<usize> {
        (0..self.processes.len())
            .filter(|&i| self.processes[i].is_some())
            .collect()
    }

    /// The holder identity (`NAME/INCARNATION`) of running replica `i`, as its log's first
    /// line states it; None before it wrote it. Only the log's head is read: the walk asks at
    /// every observation, and a soak's logs grow to megabytes.
    pub fn holder(&self, i: usize) -> Option<String> {
        use std::io::Read as _;
        let op = self.processes.get(i)?.as_ref()?;
        let mut head = Vec::new();
        std::fs::File::open(&op.log)
            .ok()?
            .take(LOG_HEAD)
            .read_to_end(&mut head)
            .ok()?;
        let log = strip_ansi(&String::from_utf8_lossy(&head));
        let rest = log.split("holder=").nth(1)?;
        rest.split_whitespace().next().map(str::to_owned)
    }

    /// Under `--shards auto`, what is left before every active parent (`ids`: parent index
    /// and ApplySet ID) is held by the replica the rendezvous hashing names among the running
    /// ones, in its current incarnation (its `shard-owner` annotation: `owners`). A set
    /// changed while a new owner's first reconcile of it is in flight gets that reconcile's
    /// stale writes: the walk lets handovers end before it goes on.
    pub fn unsettled_owners(
        &self,
        ids: &[(usize, String)],
        owners: &[Option<String>],
    ) -> Vec<String> {
        if self.mode == Mode::Single {
            return Vec::new();
        }
        let live: std::collections::BTreeSet<String> =
            self.live().into_iter().map(Self::name).collect();
        // Each running replica's holder, read once for all sets.
        let holders: std::collections::BTreeMap<usize, Option<String>> = self
            .live()
            .into_iter()
            .map(|i| (i, self.holder(i)))
            .collect();
        let mut out = Vec::new();
        for (s, id) in ids {
            let bucket = assign::bucket(id);
            let Some(name) = assign::owner(bucket, &live) else {
                out.push("no replica runs".to_owned());
                break;
            };
            let Some(want) = Self::index_of(name).and_then(|i| holders.get(&i).cloned().flatten())
            else {
                out.push(format!(
                    "replica {name} has not said its holder identity yet"
                ));
                continue;
            };
            let got = owners.get(*s).cloned().flatten();
            if got.as_deref() != Some(want.as_str()) {
                out.push(format!(
                    "{}: held by {got:?}, expected {want} (bucket {bucket} among {live:?})",
                    crate::universe::set_display(*s)
                ));
            }
        }
        out
    }

    /// Why an operator process is gone, if one ended by itself. (One whose port another
    /// process took before it bound it was started again by `OperatorProcess::start`.)
    pub fn exited(&mut self) -> Option<String> {
        for (i, slot) in self.processes.iter_mut().enumerate() {
            let Some(op) = slot else { continue };
            let Ok(Some(status)) = op.child.try_wait() else {
                continue;
            };
            let log = op.log();
            let tail: Vec<&str> = log.lines().rev().take(30).collect();
            return Some(format!(
                "operator replica {} exited by itself ({status}); the end of its log:\n{}",
                Self::name(i),
                tail.into_iter().rev().collect::<Vec<_>>().join("\n")
            ));
        }
        None
    }
}

/// Text without its terminal colour sequences (`ESC [ ... m`).
fn strip_ansi(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for d in chars.by_ref() {
                if d == 'm' {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}
