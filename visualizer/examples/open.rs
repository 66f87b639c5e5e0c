//! Opens a trace file as the viewer does (read, parse, index) and says how long each part took
//! and how many spans it holds; run it under `/usr/bin/time -v` for the peak memory:
//!
//! ```text
//! cargo run --release -p tpuemu-visualizer --example synthetic -- 1000000 /tmp/big.json
//! cargo run --release -p tpuemu-visualizer --example open -- /tmp/big.json
//! ```

use std::path::PathBuf;
use std::time::Instant;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let path = PathBuf::from(std::env::args().nth(1).ok_or("usage: open TRACE.json")?);
    let t0 = Instant::now();
    let trace = tpuemu_visualizer::model::load_trace(&path)?;
    let parsed = t0.elapsed();
    let events = trace.events.len();
    let t1 = Instant::now();
    let model = tpuemu_visualizer::model::TraceModel::new(trace, "trace");
    let indexed = t1.elapsed();
    println!(
        "{events} events in {} lanes: read and parsed in {:.2} s, indexed in {:.3} s",
        model.lanes.len(),
        parsed.as_secs_f64(),
        indexed.as_secs_f64()
    );
    Ok(())
}
