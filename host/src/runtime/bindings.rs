//! Generated bindings for docket's two worlds. Nothing outside `runtime` sees these types.

/// The version of the `docket:plugin` package in `wit/docket.wit` that these bindings are
/// generated from; a component's `docket:plugin` imports must carry exactly this version.
pub const PLUGIN_PACKAGE_VERSION: &str = "0.2.0";

/// The `adapter` world: docket's host interfaces plus `wasi:http`.
pub mod adapter {
    wasmtime::component::bindgen!({
        path: "../wit",
        world: "docket:plugin/adapter",
        exports: { default: async },
        require_store_data_send: true,
        with: {
            "wasi:io": wasmtime_wasi::p2::bindings::io,
            "wasi:http": wasmtime_wasi_http::p2::bindings::http,
        },
    });
}

/// The `handler` world; its host interfaces are the adapter world's, implemented once.
pub mod handler {
    wasmtime::component::bindgen!({
        path: "../wit",
        world: "docket:plugin/handler",
        exports: { default: async },
        require_store_data_send: true,
        with: {
            "docket:plugin/types": super::adapter::docket::plugin::types,
            "docket:plugin/log": super::adapter::docket::plugin::log,
            "docket:plugin/clock": super::adapter::docket::plugin::clock,
        },
    });
}
