//! Writes a synthetic trace (Chrome trace JSON) of about N spans, for trying the viewer and
//! the benchmark on big traces:
//!
//! ```text
//! cargo run --release -p tpuemu-visualizer --example synthetic -- 1000000 /tmp/big.json
//! ```

use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let n: usize = args.next().as_deref().unwrap_or("100000").parse()?;
    let out = PathBuf::from(args.next().unwrap_or_else(|| "synthetic_trace.json".into()));
    let trace = tpuemu_visualizer::synthetic_trace(n);
    std::fs::write(&out, tpuemu_isa::trace::chrome::to_chrome_json(&trace))?;
    println!("wrote {} events to {}", trace.events.len(), out.display());
    Ok(())
}
