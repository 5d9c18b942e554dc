//! Crash recovery: the controller's state is the fold of the ledger's entries through
//! [`flexgate_policies::control::Controller::apply`], the same code that changes it live. Then
//! the cluster is read and the last plan's caps are re-applied with their original generation
//! (idempotent at the backend).

use super::driver::Driver;
use super::gateway::StartError;
use flexgate_policies::control::entry::{DispatchPurpose, Entry};
use flexgate_policies::control::{Effect, Input};

impl Driver {
    /// Replay the ledger into the controller, read the cluster, re-apply the caps in force.
    /// Called once, before serving.
    pub(crate) async fn recover(&self) -> Result<(), StartError> {
        let _pass = self.control_pass.lock().await;
        self.verify_chain().await?;
        let mut events = 0usize;
        let mut highest_seq = 0u64;
        {
            let mut core = self.core.lock().await;
            // Reading is local and synchronous (sled); nothing else runs before the gateway
            // serves, so the lock guards no one here.
            for record in self.ledger.iter_from(0) {
                let record = record?;
                highest_seq = record.seq;
                let entry = record.entry()?;
                if matches!(entry, Entry::EventInterpreted(_)) {
                    events += 1;
                }
                core.apply(&entry);
            }
            // Ledgers of earlier versions numbered commands by ledger seq: stay above them.
            core.raise_generation_floor(highest_seq);
        }
        let jobs = self
            .backend
            .inventory()
            .await
            .map_err(|e| StartError::Backend(e.to_string()))?;
        let highest_job_generation = jobs.iter().map(|j| j.generation).max().unwrap_or(0);
        let now = self.clock.now();
        let ((), mut decided) = self
            .decide(|core| {
                core.raise_generation_floor(highest_job_generation);
                ((), core.handle(Input::Inventory(jobs), now))
            })
            .await?;
        self.flushed(&mut decided).await?;
        let reapply = {
            let mut core = self.core.lock().await;
            core.reapply_at_start()
        };
        let mut caps_reapplied = 0usize;
        for effect in reapply {
            if let Effect::Dispatch { purpose, commands } = effect {
                debug_assert_eq!(purpose, DispatchPurpose::ReapplyAtStart);
                caps_reapplied += commands.len();
                let sent = std::time::Instant::now();
                let results = self.backend.apply(&commands).await;
                self.metrics.observe_dispatch(sent.elapsed());
                self.feed(Input::CapResults {
                    purpose,
                    commands,
                    results,
                })
                .await?;
            }
        }
        let backend = self.backend.name().to_string();
        let ((), mut decided) = self
            .decide(|core| ((), core.started(events, caps_reapplied, &backend, now)))
            .await?;
        self.flushed(&mut decided).await?;
        tracing::info!(events, caps_reapplied, "state recovered from the ledger");
        Ok(())
    }

    /// Walk the whole hash chain before replaying it: the state is rebuilt from these records,
    /// so one altered record (a ceiling of 930 kW written over 130, its sled checksum
    /// recomputed) would otherwise be acted on. The replay reads every record anyway; the walk
    /// adds the hashing (figures in BENCHMARKS.md). A failure is an alarm: logged at error level
    /// with `alarm = "ledger_chain_broken"`, and the gateway does not start.
    async fn verify_chain(&self) -> Result<(), StartError> {
        let ledger = self.ledger.clone();
        let started = std::time::Instant::now();
        let verified = tokio::task::spawn_blocking(move || ledger.verify())
            .await
            .map_err(|join| {
                StartError::Ledger(crate::ledger::LedgerError::WriterFailed {
                    reason: format!("the start-up chain check did not complete: {join}"),
                })
            })?;
        match verified {
            Ok(report) => {
                tracing::info!(
                    records = report.records,
                    head = %report.head_hash,
                    elapsed_ms = started.elapsed().as_millis() as u64,
                    "ledger chain verified"
                );
                Ok(())
            }
            Err(failure) => {
                // `flexgate log` takes the data directory (the ledger lives in its `ledger/`).
                let ledger_dir = self.ledger.dir();
                let dir = ledger_dir.parent().unwrap_or(ledger_dir).display().to_string();
                tracing::error!(
                    alarm = "ledger_chain_broken",
                    seq = failure.seq,
                    reason = %failure.reason,
                    dir = %dir,
                    "the ledger fails verification: refusing to start"
                );
                Err(StartError::ChainBroken {
                    dir,
                    seq: failure.seq,
                    reason: failure.reason,
                })
            }
        }
    }
}
