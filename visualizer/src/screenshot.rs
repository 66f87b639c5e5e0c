//! Headless rendering: runs the viewer's egui code for a few frames with no window, fitted to
//! the whole trace, tessellates the last frame and rasterizes it on the CPU
//! ([`crate::raster`]), then writes a PNG. Needs no GPU, no display and no system packages.

use std::path::{Path, PathBuf};

use eframe::egui::{self, Color32, Pos2, RawInput, Rect, Vec2};
use eframe::epaint::{ClippedPrimitive, Primitive};

use crate::error::VizError;
use crate::raster::{Canvas, Textures, rasterize};
use crate::view::Viewer;

/// Frames run before the one that is kept, so panel sizes and fonts settle.
const WARMUP_FRAMES: usize = 2;

/// What a screenshot produced.
#[derive(Clone, Debug, PartialEq)]
pub struct ScreenshotInfo {
    /// The PNG written.
    pub path: PathBuf,
    /// Width, px.
    pub width: u32,
    /// Height, px.
    pub height: u32,
    /// Traces drawn.
    pub traces: usize,
    /// Spans in those traces.
    pub spans: usize,
    /// Triangles rasterized.
    pub triangles: usize,
}

/// The smallest and largest side accepted.
pub const SIZE_RANGE: std::ops::RangeInclusive<u32> = 64..=8192;

/// A window-less egui context of a fixed size, for screenshots and benchmarks.
pub struct Headless {
    ctx: egui::Context,
    textures: Textures,
    screen: Rect,
    frame: u64,
}

impl Headless {
    /// A headless "window" of `width` x `height` pixels (at one pixel per point).
    pub fn new(width: u32, height: u32) -> Result<Headless, VizError> {
        if !SIZE_RANGE.contains(&width) || !SIZE_RANGE.contains(&height) {
            return Err(VizError::BadSize { width, height });
        }
        let ctx = egui::Context::default();
        ctx.set_theme(egui::Theme::Dark);
        ctx.global_style_mut(|s| s.animation_time = 0.0);
        Ok(Headless {
            ctx,
            textures: Textures::default(),
            screen: Rect::from_min_size(Pos2::ZERO, Vec2::new(width as f32, height as f32)),
            frame: 0,
        })
    }

    /// Runs one frame of the viewer's UI and tessellates it (the whole CPU side of a frame).
    pub fn frame(&mut self, viewer: &mut Viewer) -> Vec<ClippedPrimitive> {
        let input = RawInput {
            screen_rect: Some(self.screen),
            time: Some(self.frame as f64 / 60.0),
            predicted_dt: 1.0 / 60.0,
            max_texture_side: Some(8192),
            ..RawInput::default()
        };
        self.frame += 1;
        let mut out = self.ctx.run_ui(input, |ui| viewer.ui(ui));
        self.textures.apply(&mut out.textures_delta);
        self.ctx.tessellate(out.shapes, out.pixels_per_point)
    }

    /// Rasterizes a tessellated frame on the CPU.
    pub fn rasterize(&self, prims: &[ClippedPrimitive]) -> Canvas {
        let bg = opaque(self.ctx.global_style().visuals.panel_fill);
        let mut canvas = Canvas::new(
            self.screen.width() as usize,
            self.screen.height() as usize,
            bg,
        );
        rasterize(&mut canvas, prims, &self.textures, 1.0);
        canvas
    }
}

/// Number of triangles in a tessellated frame.
pub fn triangle_count(prims: &[ClippedPrimitive]) -> usize {
    prims
        .iter()
        .map(|p| match &p.primitive {
            Primitive::Mesh(m) => m.indices.len() / 3,
            Primitive::Callback(_) => 0,
        })
        .sum()
}

/// Renders the viewer as it would look in a `width` x `height` window, fitted to all traces
/// (in time, and in height by collapsing chips other than chip 0 when the lanes do not fit).
/// Returns the image and the number of triangles drawn.
pub fn render(viewer: &mut Viewer, width: u32, height: u32) -> Result<(Canvas, usize), VizError> {
    let mut headless = Headless::new(width, height)?;
    let mut prims = Vec::new();
    for frame in 0..=WARMUP_FRAMES {
        viewer.request_fit();
        prims = headless.frame(viewer);
        if frame == 0 {
            viewer.collapse_to_fit();
        }
    }
    Ok((headless.rasterize(&prims), triangle_count(&prims)))
}

fn opaque(c: Color32) -> Color32 {
    Color32::from_rgb(c.r(), c.g(), c.b())
}

/// Writes an image as an RGB PNG.
pub fn write_png(canvas: &Canvas, out: &Path) -> Result<(), VizError> {
    let err = |reason: String| VizError::Write {
        path: out.to_path_buf(),
        reason,
    };
    let file = std::fs::File::create(out).map_err(|e| err(e.to_string()))?;
    let mut enc = png::Encoder::new(
        std::io::BufWriter::new(file),
        canvas.width as u32,
        canvas.height as u32,
    );
    enc.set_color(png::ColorType::Rgb);
    enc.set_depth(png::BitDepth::Eight);
    let mut w = enc.write_header().map_err(|e| err(e.to_string()))?;
    w.write_image_data(&canvas.to_rgb())
        .map_err(|e| err(e.to_string()))?;
    w.finish().map_err(|e| err(e.to_string()))
}

/// Renders `viewer` and writes the PNG.
pub fn screenshot_viewer(
    viewer: &mut Viewer,
    out: &Path,
    width: u32,
    height: u32,
) -> Result<ScreenshotInfo, VizError> {
    let (canvas, triangles) = render(viewer, width, height)?;
    write_png(&canvas, out)?;
    Ok(ScreenshotInfo {
        path: out.to_path_buf(),
        width,
        height,
        traces: viewer.traces.len(),
        spans: viewer.traces.iter().map(|t| t.spans.len()).sum(),
        triangles,
    })
}
