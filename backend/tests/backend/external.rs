//! Collectives carried out by another engine (`runtime::external`): the host is not held up,
//! the chip reaches the collective after its earlier work, a landed result holds back only
//! the work that reads it, and synchronising waits for it. Times are checked against hand
//! sums of the host costs set here and against the kernels' own spans.

use tpuemu_backend::foreign::RawView;
use tpuemu_backend::runtime::{CollectiveRecord, external::CollectiveEntry};
use tpuemu_backend::{HostCosts, Mode, Runtime, Tensor};
use tpuemu_isa::trace::{TraceEvent, Track};

use crate::host::rt;

fn costs(rt: &Runtime) {
    rt.set_costs(HostCosts {
        op_dispatch_ns: 1000.0,
        view_ns: 0.0,
        launch_ns: 500.0,
        record_ns: 1000.0,
        flush_ns: 0.0,
        flush_op_ns: 0.0,
        compile_ns: 0.0,
    });
}

fn dense(n: usize) -> RawView {
    RawView {
        shape: vec![n],
        strides: vec![1],
        offset: 0,
        elem_size: 4,
    }
}

fn bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// A product long enough that the device is still busy when the host moves on.
fn busy(rt: &Runtime) -> Tensor {
    let a = Tensor::from_slice(rt, &vec![0.5f32; 512 * 512], &[512, 512]).unwrap();
    rt.sync().unwrap();
    a.mm(&a).unwrap()
}

fn kernel_starts(rt: &Runtime) -> Vec<(String, f64)> {
    rt.take_trace("t")
        .events
        .into_iter()
        .filter_map(|e| match e {
            TraceEvent::Span(s) if matches!(s.track, Track::Kernel { .. }) => {
                Some((s.name, s.start_ns))
            }
            _ => None,
        })
        .collect()
}

fn record(entry: CollectiveEntry, start: f64, end: f64) -> CollectiveRecord {
    CollectiveRecord {
        entry,
        kind: "all_reduce".into(),
        label: "all_reduce sum".into(),
        bytes: 64,
        start_ns: start,
        end_ns: end,
        args: Default::default(),
    }
}

#[test]
fn the_host_enqueues_and_the_chip_arrives_after_its_earlier_work() {
    for mode in [Mode::Strict, Mode::DeferAndFuse] {
        let rt = rt(mode);
        costs(&rt);
        let _y = busy(&rt);
        let before = rt.host_time_ns();
        let e = rt
            .begin_collective("c10d::allreduce_", "[]".into())
            .unwrap();
        // Dispatch + launch, and nothing more: the host does not wait for the product
        // (DeferAndFuse first launches the recorded product: one more launch).
        let flushed = if mode == Mode::DeferAndFuse {
            500.0
        } else {
            0.0
        };
        assert_eq!(e.call_ns, before, "{mode:?}");
        assert_eq!(e.issued_ns, before + flushed + 1500.0, "{mode:?}");
        assert_eq!(rt.host_time_ns(), e.issued_ns, "{mode:?}");
        // The 512^3 product takes longer than 1.5 us of host time on any chip.
        assert!(e.device_ns > e.issued_ns + 1000.0, "{mode:?}: {e:?}");
        assert_eq!(e.ready_ns(), e.device_ns);
        // Synchronising now waits for the device, as before.
        rt.sync().unwrap();
        assert_eq!(rt.host_time_ns(), e.device_ns, "{mode:?}");
    }
}

#[test]
fn peeking_and_landing_move_no_clock_and_count_no_transfer() {
    let rt = rt(Mode::Strict);
    costs(&rt);
    let x = Tensor::from_slice(&rt, &[1.0f32, 2.0, 3.0, 4.0], &[4]).unwrap();
    rt.sync().unwrap();
    rt.reset_metrics();
    let h = rt.host_time_ns();
    assert_eq!(
        rt.peek_view(x.storage(), &dense(4)).unwrap(),
        bytes(&[1.0, 2.0, 3.0, 4.0])
    );
    // Every other element, then one landed into every other element.
    let odd = RawView {
        shape: vec![2],
        strides: vec![2],
        offset: 1,
        elem_size: 4,
    };
    assert_eq!(rt.peek_view(x.storage(), &odd).unwrap(), bytes(&[2.0, 4.0]));
    rt.land_view(x.storage(), &odd, &bytes(&[20.0, 40.0]), h + 5000.0)
        .unwrap();
    assert_eq!(rt.host_time_ns(), h);
    let m = rt.metrics();
    assert_eq!((m.h2d_transfers, m.d2h_transfers), (0, 0));
    // Reading to the host waits for the landing.
    assert_eq!(x.to_vec::<f32>().unwrap(), vec![1.0, 20.0, 3.0, 40.0]);
    assert!(rt.host_time_ns() >= h + 5000.0, "{}", rt.host_time_ns());
    assert!(
        rt.land_view(x.storage(), &dense(4), &bytes(&[1.0]), 0.0)
            .is_err()
    );
}

#[test]
fn a_landed_result_holds_back_only_the_kernels_that_read_it() {
    let rt = rt(Mode::Strict);
    costs(&rt);
    let landed = Tensor::from_slice(&rt, &[0.0f32; 1024], &[1024]).unwrap();
    let other = Tensor::from_slice(&rt, &[1.0f32; 1024], &[1024]).unwrap();
    rt.sync().unwrap();
    rt.set_profiling(true);
    let e = rt
        .begin_collective("c10d::allreduce_", "[]".into())
        .unwrap();
    let (start, end) = (e.ready_ns() + 100.0, e.ready_ns() + 1_000_000.0);
    rt.land_view(landed.storage(), &dense(1024), &bytes(&[2.0; 1024]), end)
        .unwrap();
    rt.end_collective(record(e, start, end));
    // Independent work overlaps the collective; work on its result waits for it.
    let _a = other.mul_scalar(3.0).unwrap();
    let _b = landed.mul_scalar(3.0).unwrap();
    assert!(rt.host_time_ns() < end, "the host was not held up");
    let starts = kernel_starts(&rt);
    assert_eq!(starts.len(), 2, "{starts:?}");
    assert!(starts[0].1 < start + 100_000.0, "{starts:?}");
    assert!(starts[1].1 >= end, "{starts:?}");
    assert_eq!(_b.to_vec::<f32>().unwrap(), vec![6.0; 1024]);
}

#[test]
fn waiting_for_a_collective_fences_every_later_kernel_and_sync_waits_for_it() {
    let rt = rt(Mode::Strict);
    costs(&rt);
    let x = Tensor::from_slice(&rt, &[1.0f32; 1024], &[1024]).unwrap();
    rt.sync().unwrap();
    rt.set_profiling(true);
    let e = rt
        .begin_collective("c10d::allreduce_", "[]".into())
        .unwrap();
    let end = e.ready_ns() + 2_000_000.0;
    rt.end_collective(record(e.clone(), e.ready_ns(), end));
    rt.wait_until(end);
    let _y = x.mul_scalar(2.0).unwrap();
    let starts = kernel_starts(&rt);
    assert!(starts[0].1 >= end, "{starts:?}");
    rt.sync().unwrap();
    assert!(rt.host_time_ns() >= end);

    // Without a wait, synchronising still waits for a collective in flight.
    let rt = crate::host::rt(Mode::Strict);
    let e = rt
        .begin_collective("c10d::broadcast_", "[]".into())
        .unwrap();
    let end = e.ready_ns() + 3_000_000.0;
    rt.end_collective(record(e, end - 10.0, end));
    rt.sync().unwrap();
    assert_eq!(rt.host_time_ns(), end);
}

#[test]
fn collectives_are_counted_by_kind_and_drawn_on_the_chips_collective_lane() {
    let rt = rt(Mode::Strict);
    costs(&rt);
    rt.set_profiling(true);
    for _ in 0..2 {
        let e = rt
            .begin_collective("c10d::allreduce_", "[[16]]".into())
            .unwrap();
        let ready = e.ready_ns();
        // This chip arrived 300 ns before the last rank.
        rt.end_collective(record(e, ready + 300.0, ready + 1300.0));
    }
    let m = rt.metrics();
    let c = &m.collectives["all_reduce"];
    assert_eq!((c.calls, c.bytes), (2, 128));
    assert_eq!(c.ns, 2000.0);
    assert_eq!(c.wait_ns, 600.0);
    assert_eq!(m.ops_by_name["c10d::allreduce_"], 2);
    assert_eq!(m.host_ns_by["collective"], 2000.0);
    assert!(m.report().contains("all_reduce: 2 calls, 128 bytes"));
    let t = rt.take_trace("t");
    let lanes: Vec<_> = t
        .spans()
        .filter(|s| {
            s.track
                == Track::Link {
                    chip: 0,
                    link: "collective".into(),
                }
        })
        .collect();
    assert_eq!(lanes.len(), 2);
    assert_eq!(lanes[0].duration_ns(), 1000.0);
    assert_eq!(lanes[0].args["kind"], "all_reduce");
    assert_eq!(
        t.spans().filter(|s| s.name == "c10d::allreduce_").count(),
        2
    );
}
