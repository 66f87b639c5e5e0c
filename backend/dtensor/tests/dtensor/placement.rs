//! Meshes, placements and redistribution: rank-to-chip maps, distributing and reading back,
//! errors, and the collectives a redistribution launches.

use super::*;

#[test]
fn mesh_maps_ranks_to_chips_and_groups() {
    let m = mesh24();
    assert_eq!(m.shape(), &[2, 4]);
    assert_eq!(m.dim_named("tp").unwrap(), 1);
    assert_eq!(m.topology_axes(0), &[0]);
    assert_eq!(m.topology_axes(1), &[1]);
    // Rank (dp, tp) is the chip at topology coordinates (dp, tp); chips are numbered x-fastest.
    let chips: Vec<u32> = (0..8).map(|r| m.chip(r)).collect();
    assert_eq!(chips, vec![0, 2, 4, 6, 1, 3, 5, 7]);
    assert_eq!(m.coords(6), vec![1, 2]);
    assert_eq!(m.rank_at(&[1, 2]), 6);
    assert_eq!(m.groups(1), vec![vec![0, 1, 2, 3], vec![4, 5, 6, 7]]);
    assert_eq!(
        m.groups(0),
        vec![vec![0, 4], vec![1, 5], vec![2, 6], vec![3, 7]]
    );
    // A 1-D mesh over the whole slice: rank r is chip r.
    let m = mesh(&[2, 4], &[("dp", 8)]);
    assert_eq!(m.topology_axes(0), &[0, 1]);
    assert_eq!(
        (0..8).map(|r| m.chip(r)).collect::<Vec<_>>(),
        (0..8).collect::<Vec<_>>()
    );
}

#[test]
fn mesh_errors_are_values() {
    let d = device(&[2, 4]);
    let e = DeviceMesh::new(d.clone(), &[("a", 4), ("b", 2)]).unwrap_err();
    assert!(
        e.to_string().contains("does not cover whole topology axes"),
        "{e}"
    );
    let e = DeviceMesh::new(d.clone(), &[("a", 4)]).unwrap_err();
    assert!(e.to_string().contains("has 4 ranks but"), "{e}");
    let e = DeviceMesh::new(d.clone(), &[("a", 2), ("a", 4)]).unwrap_err();
    assert!(e.to_string().contains("used twice"), "{e}");
    let e = DeviceMesh::new(d, &[]).unwrap_err();
    assert!(e.to_string().contains("at least one"), "{e}");
    let m = mesh24();
    assert!(m.dim_named("pp").is_err());
}

#[test]
fn distribute_and_read_back_every_placement() {
    let m = mesh24();
    let x = vals(8 * 12, 1);
    let want: Vec<f64> = x.iter().map(|v| *v as f64).collect();
    for ps in [
        [R, R],
        [S(0), R],
        [R, S(1)],
        [S(0), S(1)],
        [S(1), S(0)],
        [S(0), S(0)],
        [P, S(0)],
        [S(1), P],
        [P, P],
        [Placement::Partial(Reduce::Max), S(1)],
    ] {
        let d = distribute_slice(&m, &x, &[8, 12], &ps).unwrap();
        assert_eq!(d.shape(), &[8, 12]);
        assert_eq!(d.placements(), &ps);
        assert_close(&d.to_f64_vec().unwrap(), &want, 0.0, &format!("{ps:?}"));
    }
    // Local shapes: [Shard(0), Shard(0)] nests dp outside tp: 8 rows in 8 pieces.
    let d = distribute_slice(&m, &x, &[8, 12], &[S(0), S(0)]).unwrap();
    assert_eq!(d.to_local(0).shape(), &[1, 12]);
    // Rank (1, 2) holds row 1 * 4 + 2.
    let r = m.rank_at(&[1, 2]);
    let got = d.to_local(r).to_vec::<f32>().unwrap();
    assert_eq!(got, x[6 * 12..7 * 12].to_vec());
    // From a tensor on another runtime.
    let rt = single();
    let src = Tensor::from_slice(&rt, &x, &[8, 12]).unwrap();
    let d = distribute_tensor(&m, &src, &[R, S(1)]).unwrap();
    assert_eq!(d.to_local(3).shape(), &[8, 3]);
    assert_close(&d.to_f64_vec().unwrap(), &want, 0.0, "from a tensor");
}

#[test]
fn bad_placements_are_errors() {
    let m = mesh24();
    let x = vals(6 * 8, 0);
    let e = distribute_slice(&m, &x, &[6, 8], &[R, S(0)]).unwrap_err();
    assert!(e.to_string().contains("cannot be split evenly"), "{e}");
    let e = distribute_slice(&m, &x, &[6, 8], &[R]).unwrap_err();
    assert!(
        e.to_string().contains("one placement per mesh dimension"),
        "{e}"
    );
    let e = distribute_slice(&m, &x, &[6, 8], &[R, S(2)]).unwrap_err();
    assert!(matches!(e, TpuError::BadDim(_)), "{e}");
    let d = distribute_slice(&m, &x, &[6, 8], &[R, S(1)]).unwrap();
    let e = d.redistribute(&[S(0), S(0)]).unwrap_err();
    assert!(e.to_string().contains("cannot be split evenly"), "{e}");
    // A plain tensor among DTensor arguments.
    let rt = single();
    let plain = Tensor::from_slice(&rt, &x, &[6, 8]).unwrap();
    let e = dtensor::call(
        &m,
        "aten::add.Tensor",
        vec![d.clone().into(), Value::Tensor(plain).into()],
    )
    .unwrap_err();
    assert!(e.to_string().contains("mixed Tensor and DTensor"), "{e}");
    // Locals of the wrong runtime.
    let e = DTensor::from_local(&m, vec![d.to_local(1).clone(); 8], &[R, S(1)]).unwrap_err();
    assert!(e.to_string().contains("not on that rank's runtime"), "{e}");
}

const ALL: [Placement; 4] = [S(0), S(1), R, P];

#[test]
fn redistribute_between_placements() {
    // 1-D: every pair.
    let m = mesh(&[4], &[("x", 4)]);
    let x = vals(8 * 4, 2);
    let want: Vec<f64> = x.iter().map(|v| *v as f64).collect();
    for from in ALL {
        let d = distribute_slice(&m, &x, &[8, 4], &[from]).unwrap();
        for to in ALL {
            let r = d.redistribute(&[to]).unwrap();
            assert_eq!(r.placements(), &[to]);
            assert_close(
                &r.to_f64_vec().unwrap(),
                &want,
                1e-6,
                &format!("{from} -> {to}"),
            );
        }
    }
}

#[test]
fn redistribute_on_a_2d_mesh() {
    let m = mesh24();
    let x = vals(8 * 8, 3);
    let want: Vec<f64> = x.iter().map(|v| *v as f64).collect();
    let targets = [
        [R, R],
        [S(0), S(1)],
        [S(1), S(0)],
        [S(0), S(0)],
        [P, S(1)],
        [S(1), P],
    ];
    for a in ALL {
        for b in ALL {
            let d = distribute_slice(&m, &x, &[8, 8], &[a, b]).unwrap();
            for to in targets {
                let r = d.redistribute(&to).unwrap();
                assert_close(
                    &r.to_f64_vec().unwrap(),
                    &want,
                    1e-6,
                    &format!("[{a}, {b}] -> {to:?}"),
                );
            }
        }
    }
}

#[test]
fn a_shard_over_both_mesh_dimensions_moves_in_one_collective() {
    // Shard(0) on dp and on tp (a Shard on the flattened mesh): gathering or reduce-scattering
    // it is one collective over both dimensions, on both topology axes at once.
    let m = mesh24();
    let x = vals(8 * 8, 5);
    let want: Vec<f64> = x.iter().map(|v| *v as f64).collect();
    let count = |m: &DeviceMesh, name: &str| -> u64 {
        m.metrics()
            .iter()
            .map(|mt| mt.ops_by_name.get(name).copied().unwrap_or(0))
            .sum()
    };
    for (from, to, coll) in [
        ([S(0), S(0)], [R, R], "c10d::all_gather"),
        ([P, P], [S(0), S(0)], "c10d::reduce_scatter"),
        ([P, P], [R, R], "c10d::all_reduce"),
    ] {
        let d = distribute_slice(&m, &x, &[8, 8], &from).unwrap();
        m.reset_metrics();
        let r = d.redistribute(&to).unwrap();
        assert_eq!(r.placements(), &to);
        assert_close(&r.to_f64_vec().unwrap(), &want, 1e-6, coll);
        // One launch per rank (each rank counts the collectives it joins).
        assert_eq!(count(&m, coll), m.num_ranks() as u64, "{from:?} -> {to:?}");
    }
}
