//! Takes the main core module out of a component and builds the component
//! again around the rewritten module.

use wasmparser::{Encoding, Parser, Payload, TypeRef};
use wit_component::{ComponentEncoder, DecodedWasm, StringEncoding};

use crate::error::SlimError;
use crate::imports::{FuncImport, classify};
use crate::{rewrite, usage};

/// The outcome of [`slim`].
#[derive(Debug, Clone)]
pub struct Slimmed {
    /// The component to ship: rewritten, or the input unchanged when there
    /// was nothing to strip.
    pub component: Vec<u8>,
    /// The imports that were stripped (`module#name`), empty if none.
    pub stripped: Vec<String>,
}

/// Strips the stdio, environment and exit WASI imports from a `wasm32-wasip2`
/// handler component, or says why it must not (see the crate docs). A
/// component with nothing to strip (for one, an already slimmed one) comes
/// back byte for byte.
pub fn slim(component: &[u8]) -> Result<Slimmed, SlimError> {
    let module = main_module(component)?;
    let imports = func_imports(module)?;
    if !imports.iter().any(|i| i.strip) {
        return Ok(Slimmed {
            component: component.to_vec(),
            stripped: Vec::new(),
        });
    }
    usage::check(module, &imports)?;
    let mut rewritten = rewrite::strip_imports(module, &imports)?;

    // The component's own world (its imports and exports as WIT), embedded
    // in the module again: `wit-component` imports only the interfaces the
    // module still uses.
    let (resolve, world) = match wit_component::decode(component) {
        Ok(DecodedWasm::Component(resolve, world)) => (resolve, world),
        Ok(DecodedWasm::WitPackage(..)) => {
            return Err(SlimError::NotAComponent(
                "it is a WIT package, not a component".into(),
            ));
        }
        Err(e) => return Err(SlimError::Encode(format!("reading its WIT world: {e:#}"))),
    };
    // Rust components use UTF-8 for every string they lift and lower.
    wit_component::embed_component_metadata(&mut rewritten, &resolve, world, StringEncoding::UTF8)
        .map_err(|e| SlimError::Encode(format!("{e:#}")))?;
    let component = ComponentEncoder::default()
        .validate(true)
        .module(&rewritten)
        .and_then(|encoder| encoder.encode())
        .map_err(|e| SlimError::Encode(format!("{e:#}")))?;
    Ok(Slimmed {
        component,
        stripped: imports
            .iter()
            .filter(|i| i.strip)
            .map(FuncImport::label)
            .collect(),
    })
}

/// The component's first core module: `wit-component` places the handler's
/// own module there, before its generated shims.
fn main_module(component: &[u8]) -> Result<&[u8], SlimError> {
    for payload in Parser::new(0).parse_all(component) {
        match payload.map_err(|e| SlimError::NotAComponent(e.to_string()))? {
            Payload::Version {
                encoding: Encoding::Module,
                ..
            } => {
                return Err(SlimError::NotAComponent(
                    "it is a core module; give the component cargo built".into(),
                ));
            }
            Payload::ModuleSection {
                unchecked_range, ..
            } => {
                let start = usize::try_from(unchecked_range.start).unwrap_or(usize::MAX);
                let end = usize::try_from(unchecked_range.end).unwrap_or(usize::MAX);
                return component.get(start..end).ok_or(SlimError::NoCoreModule);
            }
            _ => {}
        }
    }
    Err(SlimError::NoCoreModule)
}

fn func_imports(module: &[u8]) -> Result<Vec<FuncImport>, SlimError> {
    let mut imports = Vec::new();
    for payload in Parser::new(0).parse_all(module) {
        if let Payload::ImportSection(reader) = payload? {
            for import in reader.into_imports() {
                let import = import?;
                if let TypeRef::Func(type_index) = import.ty {
                    imports.push(classify(import.module, import.name, type_index)?);
                }
            }
        }
    }
    Ok(imports)
}
