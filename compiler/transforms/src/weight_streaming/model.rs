//! The overlap plan's model, without IR: a schedule of launches (each with the bytes live at it
//! that are not streamed weights, and its load capacity) and the weights (bytes, first and last
//! launch that reads them); a plan (per weight: preloaded, or streamed from a launch on with the
//! bytes loaded during each launch); the simulator that checks a plan; the smallest budget any
//! plan needs; and the two plans that are always at hand (just in time, and the greedy tier).
//!
//! Time steps are launches in schedule order. A weight preloaded is resident from launch 0 to
//! its last use; one streamed from launch `a` is resident from `a` (its storage exists once its
//! first byte arrives) to its last use, and is loaded during launches `a .. first_use - 1`, all
//! of it before its first use. At every launch, the resident weights plus the launch's other
//! live bytes must fit the budget. Bytes loaded during a launch beyond its capacity are not
//! hidden (they slow the launch down, or wait for a copy of their own).

use std::fmt;

/// FlashMem's Table 5 classes of a launch, by how much concurrent loading it tolerates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LaunchClass {
    /// Arithmetic intensity at or above the device's ridge point (reusable operators: matmul).
    ComputeBound,
    /// Arithmetic intensity below a quarter of the ridge point (elemental operators).
    MemoryBound,
    /// Row kernels and attention (hierarchical operators: softmax, norms) and launches between
    /// a quarter of the ridge point and the ridge point.
    Mixed,
}

impl LaunchClass {
    /// The kebab-case name used in records.
    pub fn name(self) -> &'static str {
        match self {
            LaunchClass::ComputeBound => "compute-bound",
            LaunchClass::MemoryBound => "memory-bound",
            LaunchClass::Mixed => "mixed",
        }
    }
}

/// One time step: a launch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Launch {
    /// Bytes live at the launch that are not streamed weights (activations, KV caches,
    /// constants), from plan-memory's lifetimes.
    pub live: u64,
    /// Bytes the launch can load while it runs without slowing down.
    pub capacity: u64,
    pub class: LaunchClass,
}

/// One weight: a read-only upload of a function argument, streamed whole.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Weight {
    pub bytes: u64,
    /// The first launch that reads it.
    pub first_use: usize,
    /// The last launch before it is freed (`≥ first_use`).
    pub last_use: usize,
}

/// The launches and weights of one function.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Schedule {
    pub launches: Vec<Launch>,
    pub weights: Vec<Weight>,
}

/// Where one weight is loaded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Load {
    /// Before the first launch.
    Preload,
    /// During launches `from`, `from + 1`, ..., `bytes[i]` during launch `from + i`.
    Stream { from: usize, bytes: Vec<u64> },
}

/// Which step of the tiered fallback produced a plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Tier {
    /// The solver, with every launch's capacity a hard limit.
    Solver = 1,
    /// The solver, with capacities relaxed: loads beyond them cost their bytes.
    Relaxed = 2,
    /// The solver on a smaller problem: weights that cannot be hidden preloaded where the budget
    /// allows, shorter load windows, capacities relaxed.
    Preload = 3,
    /// The greedy plan (no solver).
    Greedy = 4,
}

impl Tier {
    pub fn name(self) -> &'static str {
        match self {
            Tier::Solver => "solver",
            Tier::Relaxed => "relaxed",
            Tier::Preload => "preload",
            Tier::Greedy => "greedy",
        }
    }
}

/// What a plan does, launch by launch.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Simulation {
    /// Weight bytes resident at each launch.
    pub resident: Vec<u64>,
    /// Weight bytes loaded during each launch.
    pub loaded: Vec<u64>,
    /// Of those, the bytes beyond the launch's capacity.
    pub over_capacity: Vec<u64>,
    /// The most bytes (live plus resident weights) at one launch.
    pub peak: u64,
    pub preloaded_bytes: u64,
    pub streamed_bytes: u64,
    /// Streamed bytes within capacity: the transfer the plan hides behind launches.
    pub hidden_bytes: u64,
}

impl Simulation {
    /// Bytes whose transfer is not hidden: preloaded, or loaded beyond a launch's capacity.
    pub fn unhidden_bytes(&self) -> u64 {
        self.preloaded_bytes + self.over_capacity.iter().sum::<u64>()
    }

    /// The hidden fraction of all weight bytes (1 without weights).
    pub fn hidden_fraction(&self) -> f64 {
        let total = self.preloaded_bytes + self.streamed_bytes;
        if total == 0 {
            1.0
        } else {
            self.hidden_bytes as f64 / total as f64
        }
    }
}

/// Why a plan is not a plan of its schedule under its budget.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    #[error("the plan has {found} loads for {weights} weights")]
    Count { found: usize, weights: usize },
    #[error("weight {weight} is read by launch 0 and cannot be streamed")]
    FirstLaunch { weight: usize },
    #[error("weight {weight} is loaded during launches {from}..={last}, not all before its first use at launch {first_use}")]
    Late { weight: usize, from: usize, last: usize, first_use: usize },
    #[error("weight {weight} of {bytes} bytes is streamed as {loaded} bytes")]
    Bytes { weight: usize, bytes: u64, loaded: u64 },
    #[error("at launch {launch}, {bytes} bytes are resident, over the budget of {budget}")]
    OverBudget { launch: usize, bytes: u64, budget: u64 },
}

impl Schedule {
    /// The launches weight `w` is resident at under `load`.
    fn resident_range(&self, w: usize, load: &Load) -> std::ops::RangeInclusive<usize> {
        let wt = &self.weights[w];
        match load {
            Load::Preload => 0..=wt.last_use,
            Load::Stream { from, .. } => *from..=wt.last_use,
        }
    }

    /// The plan with the least memory at every launch: each weight loaded during the launch
    /// before its first use (preloaded when launch 0 reads it). Capacities are ignored.
    pub fn just_in_time(&self) -> Vec<Load> {
        self.weights
            .iter()
            .map(|w| match w.first_use {
                0 => Load::Preload,
                f => Load::Stream { from: f - 1, bytes: vec![w.bytes] },
            })
            .collect()
    }

    /// Bytes at each launch under `loads` (live plus resident weights), without any check.
    fn bytes_at(&self, loads: &[Load]) -> Vec<u64> {
        let mut at: Vec<u64> = self.launches.iter().map(|l| l.live).collect();
        for (w, load) in loads.iter().enumerate() {
            for t in self.resident_range(w, load) {
                if let Some(b) = at.get_mut(t) {
                    *b = b.saturating_add(self.weights[w].bytes);
                }
            }
        }
        at
    }

    /// The smallest budget any plan meets, and the launch that needs it: every launch holds its
    /// live bytes, the weights it reads, and those being loaded during it for the next launch —
    /// what the just-in-time plan holds, which no plan undercuts.
    pub fn min_budget(&self) -> (u64, usize) {
        let at = self.bytes_at(&self.just_in_time());
        at.iter()
            .enumerate()
            .map(|(t, &b)| (b, t))
            .max_by_key(|&(b, t)| (b, std::cmp::Reverse(t)))
            .unwrap_or((0, 0))
    }

    /// Walks the schedule under `loads` and checks that every weight is loaded whole before its
    /// first use and that no launch exceeds `budget`. Capacities are not limits here: bytes
    /// beyond them are reported in [`Simulation::over_capacity`].
    pub fn simulate(&self, loads: &[Load], budget: u64) -> Result<Simulation, PlanError> {
        if loads.len() != self.weights.len() {
            return Err(PlanError::Count { found: loads.len(), weights: self.weights.len() });
        }
        let n = self.launches.len();
        let mut sim = Simulation {
            resident: vec![0; n],
            loaded: vec![0; n],
            over_capacity: vec![0; n],
            ..Simulation::default()
        };
        for (w, (wt, load)) in self.weights.iter().zip(loads).enumerate() {
            match load {
                Load::Preload => sim.preloaded_bytes += wt.bytes,
                Load::Stream { from, bytes } => {
                    if wt.first_use == 0 {
                        return Err(PlanError::FirstLaunch { weight: w });
                    }
                    let last = from.saturating_add(bytes.len()).saturating_sub(1);
                    if bytes.is_empty() || last >= wt.first_use {
                        return Err(PlanError::Late {
                            weight: w,
                            from: *from,
                            last,
                            first_use: wt.first_use,
                        });
                    }
                    let loaded = bytes.iter().fold(0u64, |a, &b| a.saturating_add(b));
                    if loaded != wt.bytes {
                        return Err(PlanError::Bytes { weight: w, bytes: wt.bytes, loaded });
                    }
                    for (i, &b) in bytes.iter().enumerate() {
                        sim.loaded[from + i] += b;
                    }
                    sim.streamed_bytes += wt.bytes;
                }
            }
            for t in self.resident_range(w, load) {
                if let Some(r) = sim.resident.get_mut(t) {
                    *r = r.saturating_add(wt.bytes);
                }
            }
        }
        for (t, l) in self.launches.iter().enumerate() {
            let bytes = l.live.saturating_add(sim.resident[t]);
            if bytes > budget {
                return Err(PlanError::OverBudget { launch: t, bytes, budget });
            }
            sim.peak = sim.peak.max(bytes);
            sim.over_capacity[t] = sim.loaded[t].saturating_sub(l.capacity);
            sim.hidden_bytes += sim.loaded[t] - sim.over_capacity[t];
        }
        Ok(sim)
    }

    /// The loads of streamed weights given where each starts (`None`: preloaded): launch by
    /// launch, the capacity goes to the weights being loaded by earliest first use (then index);
    /// what a weight still lacks at the launch before its first use is loaded then, beyond the
    /// capacity. A stream whose first launches got nothing starts later.
    pub fn fill(&self, starts: &[Option<usize>]) -> Vec<Load> {
        self.fill_counting(starts).0
    }

    /// [`Schedule::fill`], and the bytes of each weight loaded beyond a capacity.
    fn fill_counting(&self, starts: &[Option<usize>]) -> (Vec<Load>, Vec<u64>) {
        let n = self.launches.len();
        let mut over = vec![0u64; self.weights.len()];
        let mut rem: Vec<u64> = self.weights.iter().map(|w| w.bytes).collect();
        let mut bytes: Vec<Vec<u64>> = vec![Vec::new(); self.weights.len()];
        // A start at or after the first use is the launch before it; launch 0's weights preload.
        let starts: Vec<Option<usize>> = starts
            .iter()
            .zip(&self.weights)
            .map(|(s, w)| s.and_then(|a| w.first_use.checked_sub(1).map(|last| a.min(last))))
            .collect();
        let mut order: Vec<usize> =
            (0..self.weights.len()).filter(|&w| starts[w].is_some()).collect();
        order.sort_by_key(|&w| (self.weights[w].first_use, w));
        for t in 0..n {
            let mut cap = self.launches[t].capacity;
            for &w in &order {
                let (Some(a), f) = (starts[w], self.weights[w].first_use) else { continue };
                if t < a || t >= f {
                    continue;
                }
                let take = rem[w].min(cap);
                cap -= take;
                rem[w] -= take;
                let mut b = take;
                if t + 1 == f {
                    b += rem[w];
                    over[w] = rem[w];
                    rem[w] = 0;
                }
                bytes[w].push(b);
            }
        }
        let loads = (0..self.weights.len())
            .map(|w| match starts[w] {
                None => Load::Preload,
                Some(a) => {
                    // Launches that load nothing at either end of the window are left out.
                    let b = std::mem::take(&mut bytes[w]);
                    let skip =
                        b.iter().take_while(|&&x| x == 0).count().min(b.len().saturating_sub(1));
                    let keep = b.len() - b.iter().rev().take_while(|&&x| x == 0).count();
                    let keep = keep.max(skip + 1).min(b.len());
                    Load::Stream { from: a + skip, bytes: b[skip..keep].to_vec() }
                }
            })
            .collect();
        (loads, over)
    }

    /// A plan within every capacity, from the starts `starts` (`None`: preloaded), by
    /// FlashMem's fallback (Sec. 3.2): while some weight loads beyond a capacity, the one with
    /// the most such bytes is preloaded instead, as long as the budget holds it from launch 0.
    /// `None` where the budget does not.
    pub fn within_capacity(&self, starts: &[Option<usize>], budget: u64) -> Option<Vec<Load>> {
        let mut starts = starts.to_vec();
        loop {
            let (loads, over) = self.fill_counting(&starts);
            let Some(w) = (0..over.len())
                .filter(|&w| over[w] > 0)
                .max_by_key(|&w| (over[w], std::cmp::Reverse(w)))
            else {
                return Some(loads);
            };
            starts[w] = None;
            let preloaded = self.fill_counting(&starts).0;
            if self.simulate(&preloaded, budget).is_err() {
                return None;
            }
        }
    }

    /// Tier 4, the greedy plan, for a budget of at least [`Schedule::min_budget`]: the
    /// just-in-time residency is reserved for every weight first; then, by first use, each
    /// weight takes the capacity left at the launch before its first use and, while it still
    /// lacks bytes and the budget has room for it one launch earlier, at the launches before
    /// that. What it still lacks is loaded beyond the capacity of the launch before its first
    /// use; a weight launch 0 reads is preloaded.
    pub fn greedy(&self, budget: u64) -> Vec<Load> {
        let mut at = self.bytes_at(&self.just_in_time());
        let mut cap: Vec<u64> = self.launches.iter().map(|l| l.capacity).collect();
        let mut starts: Vec<Option<usize>> = vec![None; self.weights.len()];
        let mut order: Vec<usize> = (0..self.weights.len()).collect();
        order.sort_by_key(|&w| (self.weights[w].first_use, w));
        for w in order {
            let wt = self.weights[w];
            if wt.first_use == 0 {
                continue;
            }
            let mut t = wt.first_use - 1;
            let mut rem = wt.bytes;
            loop {
                let take = rem.min(cap[t]);
                cap[t] -= take;
                rem -= take;
                if rem == 0 || t == 0 || at[t - 1].saturating_add(wt.bytes) > budget {
                    break;
                }
                t -= 1;
                at[t] += wt.bytes;
            }
            starts[w] = Some(t);
        }
        // The capacity taken above is given out again launch by launch, so each weight gets
        // the same bytes or more where they were reserved for it.
        self.fill(&starts)
    }
}

impl fmt::Display for Load {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Load::Preload => f.write_str("preload"),
            Load::Stream { from, bytes } => write!(f, "stream from {from}: {bytes:?}"),
        }
    }
}

/// `n` bytes in the largest binary unit that keeps a whole number part (`1.5 GiB`, `300 B`).
pub fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut x = n as f64;
    let mut u = 0;
    while x >= 1024.0 && u + 1 < UNITS.len() {
        x /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{n} B")
    } else {
        format!("{x:.2} {}", UNITS[u])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn launch(live: u64, capacity: u64) -> Launch {
        Launch { live, capacity, class: LaunchClass::MemoryBound }
    }

    fn weight(bytes: u64, first_use: usize, last_use: usize) -> Weight {
        Weight { bytes, first_use, last_use }
    }

    /// Three launches, a weight read by launch 0 and one by launch 2: the first is preloaded,
    /// the second loaded during launch 1; launch 1 holds 10 live, 4 of the first and the 6
    /// being loaded: 20.
    fn small() -> Schedule {
        Schedule {
            launches: vec![launch(10, 0), launch(10, 6), launch(2, 0)],
            weights: vec![weight(4, 0, 1), weight(6, 2, 2)],
        }
    }

    #[test]
    fn the_minimum_budget_is_what_just_in_time_holds() {
        let s = small();
        assert_eq!(s.just_in_time(), vec![Load::Preload, Load::Stream { from: 1, bytes: vec![6] }]);
        assert_eq!(s.min_budget(), (20, 1));
        let sim = s.simulate(&s.just_in_time(), 20).expect("fits");
        assert_eq!(sim.resident, vec![4, 10, 6]);
        assert_eq!(sim.peak, 20);
        assert_eq!((sim.preloaded_bytes, sim.streamed_bytes, sim.hidden_bytes), (4, 6, 6));
        assert_eq!(
            s.simulate(&s.just_in_time(), 19),
            Err(PlanError::OverBudget { launch: 1, bytes: 20, budget: 19 })
        );
    }

    #[test]
    fn the_simulator_rejects_late_short_and_first_launch_streams() {
        let s = small();
        let late = [Load::Preload, Load::Stream { from: 1, bytes: vec![3, 3] }];
        assert_eq!(
            s.simulate(&late, 100),
            Err(PlanError::Late { weight: 1, from: 1, last: 2, first_use: 2 })
        );
        let short = [Load::Preload, Load::Stream { from: 0, bytes: vec![2, 3] }];
        assert_eq!(
            s.simulate(&short, 100),
            Err(PlanError::Bytes { weight: 1, bytes: 6, loaded: 5 })
        );
        let first = [Load::Stream { from: 0, bytes: vec![4] }, Load::Preload];
        assert_eq!(s.simulate(&first, 100), Err(PlanError::FirstLaunch { weight: 0 }));
        assert_eq!(
            s.simulate(&[Load::Preload], 100),
            Err(PlanError::Count { found: 1, weights: 2 })
        );
        let far = [Load::Preload, Load::Stream { from: usize::MAX, bytes: vec![6] }];
        assert!(matches!(s.simulate(&far, 100), Err(PlanError::Late { weight: 1, .. })));
    }

    /// Capacities 3, 3, 0 before a 5-byte weight read at launch 3: greedy takes nothing at
    /// launch 2, then 3 at launch 1 and 2 at launch 0 while the budget has room; `fill` then
    /// gives the bytes out by launch: 3 at launch 0, 2 at launch 1, none at 2.
    #[test]
    fn greedy_spreads_a_weight_over_earlier_capacity_while_the_budget_allows() {
        let s = Schedule {
            launches: vec![launch(0, 3), launch(0, 3), launch(0, 0), launch(0, 0)],
            weights: vec![weight(5, 3, 3)],
        };
        let plan = s.greedy(5);
        assert_eq!(plan, vec![Load::Stream { from: 0, bytes: vec![3, 2] }]);
        let sim = s.simulate(&plan, 5).expect("fits");
        assert_eq!(sim.over_capacity, vec![0, 0, 0, 0]);
        assert_eq!(sim.hidden_bytes, 5);
        // With 4 live bytes at launch 0 the weight cannot be resident there: 3 hidden at
        // launch 1, 2 loaded beyond launch 2's capacity.
        let mut s2 = s.clone();
        s2.launches[0].live = 4;
        let plan = s2.greedy(8);
        assert_eq!(plan, vec![Load::Stream { from: 1, bytes: vec![3, 2] }]);
        let sim = s2.simulate(&plan, 8).expect("fits");
        assert_eq!(sim.over_capacity, vec![0, 0, 2, 0]);
        assert_eq!(sim.unhidden_bytes(), 2);
    }

    #[test]
    fn fill_gives_capacity_by_earliest_first_use() {
        let s = Schedule {
            launches: vec![launch(0, 4), launch(0, 4), launch(0, 0), launch(0, 0)],
            weights: vec![weight(6, 3, 3), weight(3, 2, 2)],
        };
        let loads = s.fill(&[Some(0), Some(0)]);
        // Launch 0: the second weight (first use 2) takes 3, the first 1; launch 1: the first
        // takes 4; launch 2: the first's last byte, beyond capacity.
        assert_eq!(
            loads,
            vec![
                Load::Stream { from: 0, bytes: vec![1, 4, 1] },
                Load::Stream { from: 0, bytes: vec![3] },
            ]
        );
        let sim = s.simulate(&loads, 100).expect("fits");
        assert_eq!(sim.over_capacity, vec![0, 0, 1, 0]);
    }

    /// Launch capacities 4, 4, 0; weights of 6 (first use 3) and 3 (first use 2) from launch
    /// 0: the first loads 1 byte beyond launch 2's capacity, so it is preloaded, and the second
    /// then fits; with too small a budget for that preload there is no such plan.
    #[test]
    fn within_capacity_preloads_the_weight_most_over_capacity() {
        let s = Schedule {
            launches: vec![launch(0, 4), launch(0, 4), launch(0, 0), launch(0, 0)],
            weights: vec![weight(6, 3, 3), weight(3, 2, 2)],
        };
        let loads = s.within_capacity(&[Some(0), Some(0)], 100).expect("a plan");
        assert_eq!(loads, vec![Load::Preload, Load::Stream { from: 0, bytes: vec![3] }]);
        assert_eq!(s.simulate(&loads, 100).expect("fits").over_capacity, vec![0; 4]);
        assert_eq!(s.within_capacity(&[Some(0), Some(0)], 8), None);
    }

    #[test]
    fn human_units() {
        assert_eq!(human_bytes(300), "300 B");
        assert_eq!(human_bytes(3 << 29), "1.50 GiB");
        assert_eq!(human_bytes(1536 << 10), "1.50 MiB");
    }
}
