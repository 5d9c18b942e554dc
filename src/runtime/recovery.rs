//! Crash recovery and takeover: the controller's state is the fold of the ledger's entries
//! through [`flexgate_policies::control::Controller::apply`], the same code that changes it
//! live. A standby folds the records it takes in from its leader and writes nothing; whoever
//! takes charge (a single gateway at start, a replica when it begins to lead) then reads the
//! cluster and re-applies the last plan's caps with their original generation (idempotent at
//! the backend).

use super::driver::Driver;
use super::gateway::StartError;
use flexgate_policies::control::entry::{DispatchPurpose, Entry};
use flexgate_policies::control::{Effect, Input};

impl Driver {
    /// Replay the ledger into the controller, read the cluster, re-apply the caps in force.
    /// Called once, before serving, by a single gateway.
    pub(crate) async fn recover(&self) -> Result<(), StartError> {
        let _pass = self.control_pass.lock().await;
        self.verify_chain().await?;
        self.absorb().await?;
        self.take_charge_in_pass().await
    }

    /// Fold the ledger's records that the controller has not seen yet (all of them at start;
    /// those a replica took in from its leader since, on a standby) and publish the state.
    /// Writes nothing: what a standby runs to serve the same reads as its leader.
    pub async fn absorb(&self) -> Result<u64, StartError> {
        let mut core = self.core.lock().await;
        let from = self.applied.load(std::sync::atomic::Ordering::SeqCst) + 1;
        let mut highest_seq = from - 1;
        // Reading is local and synchronous (sled), records already flushed.
        for record in self.ledger.iter_from(from) {
            let record = record?;
            highest_seq = record.seq;
            let entry = record.entry()?;
            if matches!(entry, Entry::EventInterpreted(_)) {
                self.events_seen.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            }
            core.apply(&entry);
        }
        // Ledgers of earlier versions numbered commands by ledger seq: stay above them.
        core.raise_generation_floor(highest_seq);
        self.applied.store(highest_seq, std::sync::atomic::Ordering::SeqCst);
        let snapshot = core.snapshot();
        drop(core);
        self.board.publish(|previous| super::read_side::Published {
            plan_recorded_at: snapshot.plan.as_ref().and(previous.plan_recorded_at),
            snapshot,
        });
        Ok(highest_seq)
    }

    /// Throw the controller's state away and fold the whole ledger again: after a decision whose
    /// records were not made durable (its state, and whatever was decided on it, must not
    /// count), or before a replica leads.
    pub async fn rebuild(&self) -> Result<u64, StartError> {
        {
            let mut core = self.core.lock().await;
            *core = flexgate_policies::control::Controller::new(self.settings.clone())
                .map_err(|e| StartError::Facility(e.to_string()))?;
            self.applied.store(0, std::sync::atomic::Ordering::SeqCst);
            self.events_seen.store(0, std::sync::atomic::Ordering::SeqCst);
        }
        self.absorb().await
    }

    /// Take charge of the cluster, as a single gateway does at start and a replica when it
    /// begins to lead: read the cluster, re-apply the caps of the plan in force (with their
    /// original generation: idempotent at the agents), record the start.
    pub async fn take_charge(&self) -> Result<(), StartError> {
        let _pass = self.control_pass.lock().await;
        self.absorb().await?;
        self.take_charge_in_pass().await
    }

    async fn take_charge_in_pass(&self) -> Result<(), StartError> {
        let events = self.events_seen.load(std::sync::atomic::Ordering::SeqCst);
        if let super::Role::Leader { epoch, .. } = &*self.role.borrow() {
            self.backend.set_term(Some(*epoch));
        }
        if matches!(&*self.role.borrow(), super::Role::Leader { .. }) {
            // Before any cap: every agent refuses the deposed leader from now on.
            let unreached = self.backend.fence().await;
            if !unreached.is_empty() {
                tracing::warn!(
                    ?unreached,
                    "agents not fenced yet; this leader's first command to each fences it"
                );
            }
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
    pub(crate) async fn verify_chain(&self) -> Result<(), StartError> {
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
