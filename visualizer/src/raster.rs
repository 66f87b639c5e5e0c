//! A small CPU rasterizer for egui's tessellated output, so screenshots need no GPU, no
//! display and no installed packages, and come out the same on every machine.
//!
//! It does what egui's own GPU painters do, in software: each [`ClippedPrimitive`] mesh is
//! drawn triangle by triangle inside its clip rectangle; a pixel is covered when its centre is
//! inside the triangle (edge functions on 1/256-pixel fixed-point coordinates, with a
//! tie-break so pixels on a shared edge are drawn once); colour is the vertex colour
//! (interpolated) times the texture (bilinear), both premultiplied sRGB, blended "over" in
//! gamma space like egui-wgpu on a non-sRGB target. egui's feathering supplies the
//! anti-aliasing. Integer coverage and a fixed order of float operations keep the output
//! deterministic.

use std::collections::HashMap;

use eframe::egui::{Color32, TextureId};
use eframe::epaint::textures::TexturesDelta;
use eframe::epaint::{ClippedPrimitive, ImageData, Primitive, Vertex};

/// Sub-pixel precision of vertex positions, bits.
const SUBPIXEL_BITS: u32 = 8;
const ONE: i64 = 1 << SUBPIXEL_BITS;

/// An RGBA image, premultiplied sRGB, row-major.
#[derive(Clone, Debug, PartialEq)]
pub struct Canvas {
    /// Width, px.
    pub width: usize,
    /// Height, px.
    pub height: usize,
    /// Pixels, `width * height`, premultiplied RGBA.
    pub pixels: Vec<[u8; 4]>,
}

impl Canvas {
    /// A canvas filled with `color`.
    pub fn new(width: usize, height: usize, color: Color32) -> Canvas {
        Canvas {
            width,
            height,
            pixels: vec![color.to_array(); width * height],
        }
    }

    /// RGB bytes of the image composited over opaque black (for PNG).
    pub fn to_rgb(&self) -> Vec<u8> {
        self.pixels
            .iter()
            .flat_map(|p| [p[0], p[1], p[2]])
            .collect()
    }
}

struct Texture {
    size: [usize; 2],
    pixels: Vec<Color32>,
}

/// The textures egui asked to have (the font atlas, mostly).
#[derive(Default)]
pub struct Textures {
    map: HashMap<TextureId, Texture>,
}

impl Textures {
    /// Applies one frame's texture changes (whole images and patches) and empties `delta`
    /// (egui checks that every delta is handled).
    pub fn apply(&mut self, delta: &mut TexturesDelta) {
        let mut ids: Vec<&TextureId> = delta.set.keys().collect();
        ids.sort_by_key(|id| match id {
            TextureId::Managed(n) => (0, n),
            TextureId::User(n) => (1, n),
        });
        for id in ids {
            for d in &delta.set[id] {
                let ImageData::Color(img) = &d.image;
                match d.pos {
                    None => {
                        self.map.insert(
                            *id,
                            Texture {
                                size: img.size,
                                pixels: img.pixels.clone(),
                            },
                        );
                    }
                    Some([x0, y0]) => {
                        let Some(t) = self.map.get_mut(id) else {
                            continue;
                        };
                        for y in 0..img.size[1] {
                            for x in 0..img.size[0] {
                                let (tx, ty) = (x0 + x, y0 + y);
                                if tx < t.size[0] && ty < t.size[1] {
                                    t.pixels[ty * t.size[0] + tx] = img.pixels[y * img.size[0] + x];
                                }
                            }
                        }
                    }
                }
            }
        }
        for id in &delta.free {
            self.map.remove(id);
        }
        delta.clear();
    }
}

impl Texture {
    /// Bilinear sample at normalised `(u, v)`, clamped to the edge; premultiplied, 0..=1.
    fn sample(&self, u: f32, v: f32) -> [f32; 4] {
        let [w, h] = self.size;
        if w == 0 || h == 0 {
            return [1.0; 4];
        }
        let fx = (u * w as f32 - 0.5).clamp(0.0, (w - 1) as f32);
        let fy = (v * h as f32 - 0.5).clamp(0.0, (h - 1) as f32);
        let (x0, y0) = (fx.floor() as usize, fy.floor() as usize);
        let (x1, y1) = ((x0 + 1).min(w - 1), (y0 + 1).min(h - 1));
        let (ax, ay) = (fx - x0 as f32, fy - y0 as f32);
        let px = |x: usize, y: usize| self.pixels[y * w + x].to_array();
        let (p00, p10, p01, p11) = (px(x0, y0), px(x1, y0), px(x0, y1), px(x1, y1));
        let mut out = [0.0; 4];
        for c in 0..4 {
            let top = f32::from(p00[c]) * (1.0 - ax) + f32::from(p10[c]) * ax;
            let bot = f32::from(p01[c]) * (1.0 - ax) + f32::from(p11[c]) * ax;
            out[c] = (top * (1.0 - ay) + bot * ay) / 255.0;
        }
        out
    }
}

/// Draws egui's primitives onto `canvas`. `pixels_per_point` scales egui points to pixels.
pub fn rasterize(
    canvas: &mut Canvas,
    primitives: &[ClippedPrimitive],
    textures: &Textures,
    pixels_per_point: f32,
) {
    for prim in primitives {
        let Primitive::Mesh(mesh) = &prim.primitive else {
            continue; // paint callbacks need a GPU; the timeline uses none
        };
        let clip = prim.clip_rect;
        let cx0 = (clip.min.x * pixels_per_point).round().max(0.0) as i64;
        let cy0 = (clip.min.y * pixels_per_point).round().max(0.0) as i64;
        let cx1 = ((clip.max.x * pixels_per_point).round() as i64).min(canvas.width as i64);
        let cy1 = ((clip.max.y * pixels_per_point).round() as i64).min(canvas.height as i64);
        if cx0 >= cx1 || cy0 >= cy1 {
            continue;
        }
        let texture = textures.map.get(&mesh.texture_id);
        for tri in mesh.indices.chunks_exact(3) {
            let v = |i: u32| mesh.vertices.get(i as usize);
            let (Some(a), Some(b), Some(c)) = (v(tri[0]), v(tri[1]), v(tri[2])) else {
                continue;
            };
            triangle(
                canvas,
                [a, b, c],
                texture,
                pixels_per_point,
                (cx0, cy0, cx1, cy1),
            );
        }
    }
}

fn fixed(v: f32, ppp: f32) -> i64 {
    let x = f64::from(v * ppp) * ONE as f64;
    if x.is_finite() {
        x.round().clamp(-(1i64 << 40) as f64, (1i64 << 40) as f64) as i64
    } else {
        0
    }
}

/// Twice the signed area of (a, b, p).
#[inline]
fn edge(a: (i64, i64), b: (i64, i64), p: (i64, i64)) -> i64 {
    (b.0 - a.0) * (p.1 - a.1) - (b.1 - a.1) * (p.0 - a.0)
}

/// Whether pixels exactly on edge a -> b belong to this triangle (exactly one of the two
/// directions of an edge owns it).
#[inline]
fn owns(a: (i64, i64), b: (i64, i64)) -> bool {
    let (dx, dy) = (b.0 - a.0, b.1 - a.1);
    dy > 0 || (dy == 0 && dx < 0)
}

fn triangle(
    canvas: &mut Canvas,
    verts: [&Vertex; 3],
    texture: Option<&Texture>,
    ppp: f32,
    clip: (i64, i64, i64, i64),
) {
    let mut p: [(i64, i64); 3] = verts.map(|v| (fixed(v.pos.x, ppp), fixed(v.pos.y, ppp)));
    let mut vs = verts;
    let mut area = edge(p[0], p[1], p[2]);
    if area == 0 {
        return;
    }
    if area < 0 {
        p.swap(1, 2);
        vs.swap(1, 2);
        area = -area;
    }
    let min_x = p.iter().map(|q| q.0).min().unwrap_or(0);
    let max_x = p.iter().map(|q| q.0).max().unwrap_or(0);
    let min_y = p.iter().map(|q| q.1).min().unwrap_or(0);
    let max_y = p.iter().map(|q| q.1).max().unwrap_or(0);
    // Pixels whose centres (x + 0.5) can fall inside.
    let x0 = (min_x >> SUBPIXEL_BITS).max(clip.0);
    let x1 = ((max_x >> SUBPIXEL_BITS) + 1).min(clip.2);
    let y0 = (min_y >> SUBPIXEL_BITS).max(clip.1);
    let y1 = ((max_y >> SUBPIXEL_BITS) + 1).min(clip.3);
    if x0 >= x1 || y0 >= y1 {
        return;
    }
    let edges = [(p[1], p[2]), (p[2], p[0]), (p[0], p[1])];
    let bias = edges.map(|(a, b)| if owns(a, b) { 0 } else { -1 });
    let inv_area = 1.0 / area as f32;
    let col = vs.map(|v| v.color.to_array().map(|c| f32::from(c) / 255.0));
    let uv = vs.map(|v| (v.uv.x, v.uv.y));
    let constant_color = col[0] == col[1] && col[1] == col[2];
    for py in y0..y1 {
        let cy = py * ONE + ONE / 2;
        for px in x0..x1 {
            let cx = px * ONE + ONE / 2;
            let q = (cx, cy);
            let w = [
                edge(edges[0].0, edges[0].1, q),
                edge(edges[1].0, edges[1].1, q),
                edge(edges[2].0, edges[2].1, q),
            ];
            if w[0] + bias[0] < 0 || w[1] + bias[1] < 0 || w[2] + bias[2] < 0 {
                continue;
            }
            let l = [
                w[0] as f32 * inv_area,
                w[1] as f32 * inv_area,
                w[2] as f32 * inv_area,
            ];
            let vc = if constant_color {
                col[0]
            } else {
                let mut c = [0.0; 4];
                for (k, ck) in c.iter_mut().enumerate() {
                    *ck = col[0][k] * l[0] + col[1][k] * l[1] + col[2][k] * l[2];
                }
                c
            };
            let tc = match texture {
                Some(t) => {
                    let u = uv[0].0 * l[0] + uv[1].0 * l[1] + uv[2].0 * l[2];
                    let v = uv[0].1 * l[0] + uv[1].1 * l[1] + uv[2].1 * l[2];
                    t.sample(u, v)
                }
                None => [1.0; 4],
            };
            let src = [vc[0] * tc[0], vc[1] * tc[1], vc[2] * tc[2], vc[3] * tc[3]];
            let dst = &mut canvas.pixels[py as usize * canvas.width + px as usize];
            let keep = 1.0 - src[3];
            for k in 0..4 {
                let v = src[k] * 255.0 + f32::from(dst[k]) * keep;
                dst[k] = v.round().clamp(0.0, 255.0) as u8;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use eframe::egui::{Mesh, Rect, pos2};

    fn prim(mesh: Mesh) -> ClippedPrimitive {
        ClippedPrimitive {
            clip_rect: Rect::from_min_max(pos2(0.0, 0.0), pos2(100.0, 100.0)),
            primitive: Primitive::Mesh(mesh),
        }
    }

    #[test]
    fn a_rectangle_fills_exactly_its_pixels() {
        let mut mesh = Mesh::default();
        mesh.add_colored_rect(
            Rect::from_min_max(pos2(2.0, 3.0), pos2(6.0, 5.0)),
            Color32::RED,
        );
        let mut c = Canvas::new(10, 10, Color32::BLACK);
        // No textures loaded: plain vertex colour.
        rasterize(&mut c, &[prim(mesh)], &Textures::default(), 1.0);
        let red: Vec<(usize, usize)> = (0..100)
            .filter(|i| c.pixels[*i] == [255, 0, 0, 255])
            .map(|i| (i % 10, i / 10))
            .collect();
        // 4 x 2 pixels, each drawn once even though two triangles share the diagonal.
        assert_eq!(red.len(), 8);
        assert!(
            red.iter()
                .all(|&(x, y)| (2..6).contains(&x) && (3..5).contains(&y))
        );
    }

    #[test]
    fn translucent_shared_edges_are_not_drawn_twice() {
        let mut mesh = Mesh::default();
        let half = Color32::from_rgba_premultiplied(100, 0, 0, 128);
        mesh.add_colored_rect(Rect::from_min_max(pos2(0.0, 0.0), pos2(10.0, 10.0)), half);
        let mut c = Canvas::new(10, 10, Color32::BLACK);
        rasterize(&mut c, &[prim(mesh)], &Textures::default(), 1.0);
        assert!(c.pixels.iter().all(|p| *p == c.pixels[0]), "uneven fill");
        assert_eq!(c.pixels[0][0], 100);
    }

    #[test]
    fn clip_rect_and_scale_apply() {
        let mut mesh = Mesh::default();
        mesh.add_colored_rect(
            Rect::from_min_max(pos2(0.0, 0.0), pos2(10.0, 10.0)),
            Color32::WHITE,
        );
        let clipped = ClippedPrimitive {
            clip_rect: Rect::from_min_max(pos2(0.0, 0.0), pos2(2.0, 2.0)),
            primitive: Primitive::Mesh(mesh),
        };
        let mut c = Canvas::new(10, 10, Color32::BLACK);
        rasterize(&mut c, &[clipped], &Textures::default(), 2.0);
        let white = c.pixels.iter().filter(|p| p[0] == 255).count();
        assert_eq!(white, 16); // 2x2 points at 2 px per point
    }
}
