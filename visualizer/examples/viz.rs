//! A stand-in for `tpuemu viz` while the CLI is wired elsewhere:
//!
//! ```text
//! cargo run -p tpuemu-visualizer --example viz -- TRACE [TRACE2] [--screenshot OUT.png] [--width W] [--height H]
//! ```

use std::path::PathBuf;

fn main() {
    let mut paths = Vec::new();
    let mut shot: Option<PathBuf> = None;
    let (mut w, mut h) = (
        tpuemu_visualizer::DEFAULT_WIDTH,
        tpuemu_visualizer::DEFAULT_HEIGHT,
    );
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut num = |name: &str| -> u32 {
            args.next()
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(|| fail(&format!("{name} needs a number")))
        };
        match a.as_str() {
            "--screenshot" => shot = args.next().map(PathBuf::from),
            "--width" => w = num("--width"),
            "--height" => h = num("--height"),
            _ => paths.push(PathBuf::from(a)),
        }
    }
    let result = match shot {
        Some(out) => tpuemu_visualizer::screenshot(&paths, &out, w, h).map(|i| {
            println!(
                "wrote {} ({}x{}, {} spans, {} triangles)",
                i.path.display(),
                i.width,
                i.height,
                i.spans,
                i.triangles
            )
        }),
        None => tpuemu_visualizer::run_viewer(&paths),
    };
    if let Err(e) = result {
        fail(&e.to_string());
    }
}

fn fail(msg: &str) -> ! {
    eprintln!("error: {msg}");
    std::process::exit(1)
}
