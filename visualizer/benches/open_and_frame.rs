//! Benchmarks on a 1,000,000-span synthetic trace: opening it (JSON parse + lane index, and
//! the index alone), and one frame zoomed out to the whole trace (culling alone; the whole CPU
//! side of a frame: egui layout, culling, painting, tessellation; and the same plus CPU
//! rasterization, i.e. a full headless frame), at 1600x1000.
//!
//! ```text
//! cargo bench -p tpuemu-visualizer --bench open_and_frame
//! ```

use std::hint::black_box;
use std::time::Duration;

use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use tpuemu_isa::trace::chrome::{from_chrome_json, to_chrome_json};
use tpuemu_visualizer::index::DrawItem;
use tpuemu_visualizer::screenshot::Headless;
use tpuemu_visualizer::{TraceModel, ViewOptions, Viewer, synthetic_trace};

const SPANS: usize = 1_000_000;

fn benches(c: &mut Criterion) {
    let trace = synthetic_trace(SPANS);
    let json = to_chrome_json(&trace);
    eprintln!(
        "trace: {} events, {:.0} MB of JSON",
        trace.events.len(),
        json.len() as f64 / 1e6
    );

    let mut g = c.benchmark_group("open_1m");
    g.sample_size(10).measurement_time(Duration::from_secs(40));
    g.bench_function("parse_and_index", |b| {
        b.iter(|| {
            let t = from_chrome_json(black_box(&json)).expect("valid trace");
            black_box(TraceModel::new(t, "bench"))
        })
    });
    g.bench_function("index_only", |b| {
        b.iter_batched(
            || trace.clone(),
            |t| black_box(TraceModel::new(t, "bench")),
            BatchSize::LargeInput,
        )
    });
    g.finish();

    let model = TraceModel::new(trace, "bench");
    let mut viewer = Viewer::new(vec![model], ViewOptions::default());
    let mut headless = Headless::new(1600, 1000).expect("valid size");
    // Two frames to settle panels and fit the whole trace; stats get cached.
    for _ in 0..2 {
        viewer.request_fit();
        headless.frame(&mut viewer);
    }

    let mut g = c.benchmark_group("frame_1m_zoomed_out");
    g.sample_size(20);
    g.bench_function("cull_all_lanes", |b| {
        let axis = viewer.axis;
        let mut items: Vec<DrawItem> = Vec::new();
        b.iter(|| {
            let mut n = 0;
            for lane in &viewer.traces[0].lanes {
                for row in &lane.rows {
                    items.clear();
                    row.cull(&axis, 1.0, &mut items);
                    n += items.len();
                }
            }
            black_box(n)
        })
    });
    g.bench_function("egui_frame_and_tessellate", |b| {
        b.iter(|| black_box(headless.frame(&mut viewer).len()))
    });
    g.bench_function("full_headless_render", |b| {
        b.iter(|| {
            let prims = headless.frame(&mut viewer);
            black_box(headless.rasterize(&prims))
        })
    });
    g.finish();
}

criterion_group!(open_and_frame, benches);
criterion_main!(open_and_frame);
