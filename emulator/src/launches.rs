//! The record of each launch until it is reported: when it ran, its fault, what it did.
//!
//! A device keeps a launch's record so that `wait` can report it. Kept forever, records grow
//! with every launch of a long run (a CI suite makes millions) and finding the unreported ones
//! at each `synchronize` costs as many steps as launches were ever made. So the log keeps the
//! records in launch order, remembers the first launch that may be unreported, and drops a
//! record once it has been reported and [`KEEP_LAUNCHES`] later launches were made. A record
//! not yet reported is never dropped (its fault must reach someone). `wait` on a dropped launch
//! is refused with a message that says so, never answered with made-up figures.

use std::collections::VecDeque;

use tpuemu_isa::{DeviceError, LaunchId};

use crate::stats::LaunchStats;

/// Reported launches whose records are kept after they were reported: `wait` and `stats` on
/// any of the last this many launches work however often they are asked.
pub const KEEP_LAUNCHES: usize = 1 << 16;

/// One launch.
pub(crate) struct LaunchRecord {
    pub start_ns: f64,
    pub end_ns: f64,
    pub error: Option<DeviceError>,
    pub reported: bool,
    pub stats: LaunchStats,
}

/// The records, oldest first.
#[derive(Default)]
pub(crate) struct LaunchLog {
    records: VecDeque<LaunchRecord>,
    /// The id of `records[0]`.
    first: u64,
    /// Every launch before this one has been reported.
    unreported_from: u64,
}

impl LaunchLog {
    /// Adds a launch's record; returns its id.
    pub fn push(&mut self, record: LaunchRecord) -> LaunchId {
        self.records.push_back(record);
        while self.records.len() > KEEP_LAUNCHES && self.records.front().is_some_and(|r| r.reported)
        {
            self.records.pop_front();
            self.first += 1;
        }
        LaunchId(self.first + self.records.len() as u64 - 1)
    }

    /// The record of launch `id`, or why there is none.
    pub fn get_mut(&mut self, id: LaunchId) -> Result<&mut LaunchRecord, DeviceError> {
        let next = self.first + self.records.len() as u64;
        if id.0 >= next {
            return Err(DeviceError::InvalidRequest(format!(
                "launch {} does not exist",
                id.0
            )));
        }
        match id.0.checked_sub(self.first) {
            Some(i) => Ok(&mut self.records[i as usize]),
            None => Err(DeviceError::InvalidRequest(format!(
                "launch {} was reported and its record dropped: the device keeps the records \
                 of the last {KEEP_LAUNCHES} launches",
                id.0
            ))),
        }
    }

    /// The record of launch `id`, where it is kept.
    pub fn get(&self, id: LaunchId) -> Option<&LaunchRecord> {
        let i = id.0.checked_sub(self.first)?;
        self.records.get(usize::try_from(i).ok()?)
    }

    /// Marks every launch reported; returns the first fault among those that were not.
    pub fn take_unreported(&mut self) -> Option<DeviceError> {
        let from = self.unreported_from.saturating_sub(self.first) as usize;
        let mut first = None;
        for r in self.records.iter_mut().skip(from) {
            if !r.reported {
                r.reported = true;
                if first.is_none() {
                    first = r.error.clone();
                }
            }
        }
        self.unreported_from = self.first + self.records.len() as u64;
        first
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(error: Option<&str>) -> LaunchRecord {
        LaunchRecord {
            start_ns: 1.0,
            end_ns: 2.0,
            error: error.map(|e| DeviceError::InvalidRequest(e.into())),
            reported: false,
            stats: LaunchStats {
                start_cycle: 0,
                end_cycle: 0,
                cores: Vec::new(),
                represented_by: None,
            },
        }
    }

    #[test]
    fn ids_count_every_launch_and_unknown_ones_are_refused() {
        let mut log = LaunchLog::default();
        assert_eq!(log.push(record(None)), LaunchId(0));
        assert_eq!(log.push(record(None)), LaunchId(1));
        assert!(log.get_mut(LaunchId(1)).is_ok());
        let e = log.get_mut(LaunchId(2)).err().expect("no launch 2");
        assert!(e.to_string().contains("does not exist"), "{e}");
    }

    #[test]
    fn unreported_records_stay_and_reported_ones_go_after_the_window() {
        let mut log = LaunchLog::default();
        log.push(record(Some("fault in launch 0")));
        for _ in 0..KEEP_LAUNCHES + 10 {
            log.push(record(None));
        }
        // Launch 0 was never reported: it is kept, with its fault.
        assert!(log.get(LaunchId(0)).is_some());
        let e = log.take_unreported().expect("the fault of launch 0");
        assert!(e.to_string().contains("launch 0"), "{e}");
        assert!(log.take_unreported().is_none(), "reported once");
        // Now every record is reported: the next launch drops all but the window.
        let id = log.push(record(None));
        assert_eq!(id.0, KEEP_LAUNCHES as u64 + 11);
        assert!(log.get(LaunchId(0)).is_none());
        let e = log.get_mut(LaunchId(0)).err().expect("dropped");
        assert!(e.to_string().contains("dropped"), "{e}");
        assert!(log.get(LaunchId(id.0 + 1 - KEEP_LAUNCHES as u64)).is_some());
        assert!(log.get(LaunchId(id.0 - KEEP_LAUNCHES as u64)).is_none());
    }

    #[test]
    fn a_fault_after_a_synchronize_is_found_by_the_next() {
        let mut log = LaunchLog::default();
        log.push(record(None));
        assert!(log.take_unreported().is_none());
        log.push(record(Some("late fault")));
        let e = log.take_unreported().expect("the late fault");
        assert!(e.to_string().contains("late fault"), "{e}");
    }
}
