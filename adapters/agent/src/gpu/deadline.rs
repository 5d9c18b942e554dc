//! Every driver call under a deadline, one worker thread per GPU.
//!
//! A driver call can hang (a GPU falling off the bus, a driver in a bad state), and NVML calls
//! have no timeout of their own. The lease book calls the GPUs under its lock, so a hung call
//! would stall every lease, renewal, expiry and health answer of the node. Here each GPU's
//! calls run on that GPU's own thread and the caller waits at most the deadline: a call that
//! does not answer in time fails `Unresponsive`, and while it stays hung every later call on
//! that GPU fails at once (never queued behind it), so the other GPUs and the API keep their
//! usual times. When the hung call returns, the GPU answers again.

use super::{DriverInventory, GpuControl, GpuError, GpuInfo, Limits, Readings};
use crate::api::{GpuBackend, UnavailableGpu};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

type Job = Box<dyn FnOnce(&dyn GpuControl) + Send>;

/// The worker key of calls about the whole node (the driver's listing), which no GPU's worker
/// should wait behind, nor they behind it.
const NODE: u32 = u32::MAX;

/// One GPU's worker: the thread its calls run on, and what is in flight there.
struct Worker {
    jobs: Mutex<Sender<Job>>,
    /// A call is running on the thread now (set before sending, cleared by the thread).
    busy: Arc<AtomicBool>,
    /// The call that is (or was last) in flight, for the error and `/v1/health`.
    call: Arc<Mutex<&'static str>>,
}

/// A [`GpuControl`] whose every call answers within `deadline` (see the module docs).
pub struct Deadlined {
    inner: Arc<dyn GpuControl>,
    gpus: Vec<GpuInfo>,
    workers: Vec<(u32, Worker)>,
    deadline: Duration,
}

impl std::fmt::Debug for Deadlined {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Deadlined")
            .field("gpus", &self.gpus.len())
            .field("deadline", &self.deadline)
            .finish_non_exhaustive()
    }
}

impl Deadlined {
    /// Wrap `inner`, giving each of its GPUs a worker thread and each call `deadline`.
    pub fn new(inner: Box<dyn GpuControl>, deadline: Duration) -> Self {
        let inner: Arc<dyn GpuControl> = Arc::from(inner);
        let gpus = inner.gpus().to_vec();
        let workers = gpus
            .iter()
            .map(|g| g.index)
            .chain(std::iter::once(NODE))
            .map(|index| {
                let (tx, rx) = channel::<Job>();
                let busy = Arc::new(AtomicBool::new(false));
                let worker_inner = inner.clone();
                let name = if index == NODE {
                    "gpu-node".to_owned()
                } else {
                    format!("gpu-{index}")
                };
                let spawned = std::thread::Builder::new()
                    .name(name)
                    .spawn(move || run(&*worker_inner, &rx));
                if let Err(e) = spawned {
                    tracing::error!(gpu = index, "no worker thread for the GPU ({e}); its calls will fail");
                }
                (
                    index,
                    Worker {
                        jobs: Mutex::new(tx),
                        busy,
                        call: Arc::new(Mutex::new("")),
                    },
                )
            })
            .collect();
        Self {
            inner,
            gpus,
            workers,
            deadline,
        }
    }

    fn deadline_ms(&self) -> u64 {
        u64::try_from(self.deadline.as_millis()).unwrap_or(u64::MAX)
    }

    /// Run `f` on GPU `index`'s worker, waiting at most the deadline.
    fn call<T: Send + 'static>(
        &self,
        index: u32,
        name: &'static str,
        f: impl FnOnce(&dyn GpuControl) -> Result<T, GpuError> + Send + 'static,
    ) -> Result<T, GpuError> {
        let Some((_, worker)) = self.workers.iter().find(|(i, _)| *i == index) else {
            return Err(GpuError::NoSuchGpu(index));
        };
        if worker.busy.swap(true, Ordering::SeqCst) {
            let hung = *worker.call.lock().unwrap_or_else(PoisonError::into_inner);
            return Err(GpuError::Unresponsive {
                call: hung,
                deadline_ms: self.deadline_ms(),
            });
        }
        *worker.call.lock().unwrap_or_else(PoisonError::into_inner) = name;
        let (tx, rx) = channel();
        let busy = worker.busy.clone();
        let job: Job = Box::new(move |gpus| {
            let result = f(gpus);
            // Idle again before the caller hears back, so that it sees the GPU answering.
            busy.store(false, Ordering::SeqCst);
            let _ = tx.send(result);
        });
        let sent = worker.jobs.lock().unwrap_or_else(PoisonError::into_inner).send(job);
        if sent.is_err() {
            worker.busy.store(false, Ordering::SeqCst);
            return Err(GpuError::Driver(format!("GPU {index}'s worker thread is gone")));
        }
        match rx.recv_timeout(self.deadline) {
            Ok(result) => result,
            Err(_) => {
                tracing::error!(
                    gpu = index,
                    call = name,
                    deadline_ms = self.deadline_ms(),
                    "the driver did not answer in time: GPU unresponsive"
                );
                Err(GpuError::Unresponsive {
                    call: name,
                    deadline_ms: self.deadline_ms(),
                })
            }
        }
    }

    /// The GPUs with a call hung now.
    fn unresponsive(&self) -> Vec<UnavailableGpu> {
        self.workers
            .iter()
            .filter(|(index, w)| *index != NODE && w.busy.load(Ordering::SeqCst))
            .map(|(index, w)| UnavailableGpu {
                index: *index,
                reason: format!(
                    "unresponsive: the driver has not answered {} (deadline {} ms)",
                    *w.call.lock().unwrap_or_else(PoisonError::into_inner),
                    self.deadline_ms()
                ),
            })
            .collect()
    }
}

/// A worker's loop: one call at a time (each job marks the GPU idle when its call returns).
fn run(gpus: &dyn GpuControl, jobs: &Receiver<Job>) {
    while let Ok(job) = jobs.recv() {
        job(gpus);
    }
}

impl GpuControl for Deadlined {
    fn backend(&self) -> GpuBackend {
        self.inner.backend()
    }

    fn gpus(&self) -> &[GpuInfo] {
        &self.gpus
    }

    fn limits(&self, index: u32) -> Result<Limits, GpuError> {
        self.call(index, "limits", move |g| g.limits(index))
    }

    fn set_limit(&self, index: u32, limit_mw: u32) -> Result<(), GpuError> {
        self.call(index, "set_limit", move |g| g.set_limit(index, limit_mw))
    }

    fn readings(&self, index: u32) -> Result<Readings, GpuError> {
        self.call(index, "readings", move |g| g.readings(index))
    }

    fn persistence(&self, index: u32) -> Result<Option<bool>, GpuError> {
        self.call(index, "persistence", move |g| g.persistence(index))
    }

    fn mig_instances(&self, index: u32) -> Result<Option<u32>, GpuError> {
        self.call(index, "mig_instances", move |g| g.mig_instances(index))
    }

    fn inventory(&self) -> Result<Option<DriverInventory>, GpuError> {
        self.call(NODE, "inventory", |g| g.inventory())
    }

    fn unavailable(&self) -> Vec<UnavailableGpu> {
        let mut out = self.inner.unavailable();
        out.extend(self.unresponsive());
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu::GpuError;
    use crate::gpu::tests::info;

    /// Two GPUs; GPU 1's reads hang while `hang` is set.
    struct Hanging {
        gpus: Vec<GpuInfo>,
        hang: Arc<AtomicBool>,
    }

    impl GpuControl for Hanging {
        fn backend(&self) -> GpuBackend {
            GpuBackend::Simulated
        }
        fn gpus(&self) -> &[GpuInfo] {
            &self.gpus
        }
        fn limits(&self, index: u32) -> Result<Limits, GpuError> {
            while index == 1 && self.hang.load(Ordering::SeqCst) {
                std::thread::sleep(Duration::from_millis(5));
            }
            Ok(Limits {
                requested_mw: 700_000,
                enforced_mw: 700_000,
            })
        }
        fn set_limit(&self, _: u32, _: u32) -> Result<(), GpuError> {
            Ok(())
        }
        fn readings(&self, _: u32) -> Result<Readings, GpuError> {
            Err(GpuError::NotSupported)
        }
    }

    #[test]
    fn a_hung_gpu_fails_at_its_deadline_then_at_once_and_the_other_answers_throughout() {
        let hang = Arc::new(AtomicBool::new(true));
        let gpus = Deadlined::new(
            Box::new(Hanging {
                gpus: vec![info(0), info(1)],
                hang: hang.clone(),
            }),
            Duration::from_millis(100),
        );
        assert!(gpus.limits(0).is_ok());
        let started = std::time::Instant::now();
        assert!(matches!(
            gpus.limits(1),
            Err(GpuError::Unresponsive { call: "limits", .. })
        ));
        assert!(started.elapsed() >= Duration::from_millis(100));
        // Still hung: at once, not after another deadline; GPU 0 is unaffected.
        let again = std::time::Instant::now();
        assert!(matches!(gpus.set_limit(1, 300_000), Err(GpuError::Unresponsive { .. })));
        assert!(again.elapsed() < Duration::from_millis(50));
        assert!(gpus.limits(0).is_ok());
        assert_eq!(gpus.unavailable().iter().map(|u| u.index).collect::<Vec<_>>(), vec![1]);
        // The call returns: the GPU answers again.
        hang.store(false, Ordering::SeqCst);
        let deadline = std::time::Instant::now() + Duration::from_secs(2);
        while gpus.limits(1).is_err() {
            assert!(std::time::Instant::now() < deadline, "GPU 1 never answered again");
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(gpus.unavailable().is_empty());
    }
}
