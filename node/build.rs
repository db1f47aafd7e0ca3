//! Linker settings for a Node-API addon (napi-build).

fn main() {
    napi_build::setup();
}
