//! The eframe window (wgpu renderer) around the [`Viewer`], and the mapping of eframe's
//! start-up failures (no display, no GPU adapter) to [`VizError`]s that say what to do.

use eframe::egui;

use crate::error::VizError;
use crate::view::Viewer;

struct VizApp {
    viewer: Viewer,
}

impl eframe::App for VizApp {
    fn ui(&mut self, ui: &mut egui::Ui, _frame: &mut eframe::Frame) {
        self.viewer.ui(ui);
    }
}

/// Opens the window and runs until it is closed.
pub fn run_window(viewer: Viewer, title: &str) -> Result<(), VizError> {
    if cfg!(target_os = "linux")
        && std::env::var_os("DISPLAY").is_none()
        && std::env::var_os("WAYLAND_DISPLAY").is_none()
    {
        return Err(VizError::NoDisplay {
            detail: "neither DISPLAY nor WAYLAND_DISPLAY is set".into(),
        });
    }
    let options = eframe::NativeOptions {
        viewport: egui::ViewportBuilder::default()
            .with_title(title)
            .with_inner_size([1600.0, 900.0]),
        renderer: eframe::Renderer::Wgpu,
        ..Default::default()
    };
    // Our own event loop (eframe::run_native would keep one in a thread-local; see Cargo.toml).
    let event_loop = winit::event_loop::EventLoop::<eframe::UserEvent>::with_user_event()
        .build()
        .map_err(|e| from_eframe(eframe::Error::WinitEventLoop(e)))?;
    // eframe keeps a start-up failure (the window, the GPU adapter) to itself when it runs on
    // an event loop it did not make: the app is created only once both are up.
    let opened = std::cell::Cell::new(false);
    let mut app = eframe::create_native(
        title,
        options,
        Box::new(|cc| {
            opened.set(true);
            cc.egui_ctx.set_theme(egui::Theme::Dark);
            Ok(Box::new(VizApp { viewer }))
        }),
        &event_loop,
    );
    event_loop
        .run_app(&mut app)
        .map_err(|e| from_eframe(eframe::Error::WinitEventLoop(e)))?;
    if !opened.get() {
        return Err(VizError::Window(
            "the window or its GPU renderer could not be set up (no usable display, or no GPU \
             adapter); use --screenshot OUT.png, which needs neither"
                .into(),
        ));
    }
    Ok(())
}

fn from_eframe(e: eframe::Error) -> VizError {
    use eframe::egui_wgpu::WgpuError;
    match e {
        eframe::Error::Wgpu(
            w @ (WgpuError::RequestAdapterError(_)
            | WgpuError::CustomNativeAdapterSelectionError(_)),
        ) => VizError::NoAdapter {
            detail: w.to_string(),
        },
        eframe::Error::WinitEventLoop(w) => VizError::NoDisplay {
            detail: w.to_string(),
        },
        eframe::Error::Winit(w) => VizError::NoDisplay {
            detail: w.to_string(),
        },
        other => VizError::Window(other.to_string()),
    }
}
