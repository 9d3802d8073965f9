//! OpenAPI v3 documents: the `/openapi/v3` index and one document per group-version.

use crate::resources::{ResDef, View};
use crate::store::State;
use serde_json::{Map, Value, json};
use std::hash::{Hash, Hasher};

const OBJECT_META: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta";
const LIST_META: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.ListMeta";

/// Schema name prefix for a group-version, as kube-apiserver names them.
fn prefix(group: &str, version: &str) -> String {
    match group {
        "" => format!("io.k8s.api.core.{version}"),
        "apiextensions.k8s.io" => {
            format!("io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.{version}")
        }
        g if g.ends_with(".k8s.io") => format!(
            "io.k8s.api.{}.{version}",
            g.trim_end_matches(".k8s.io").replace('.', "_")
        ),
        "apps" | "batch" | "policy" | "autoscaling" => format!("io.k8s.api.{group}.{version}"),
        g => {
            let mut parts: Vec<&str> = g.split('.').collect();
            parts.reverse();
            format!("{}.{version}", parts.join("."))
        }
    }
}

fn gvk(def: &ResDef, kind: &str) -> Value {
    json!({"group": def.group, "version": def.version, "kind": kind})
}

fn object_meta() -> Value {
    json!({
        "description": "ObjectMeta is metadata that all persisted resources must have, which includes all objects users must create.",
        "type": "object",
        "properties": {
            "name": {"type": "string", "description": "Name must be unique within a namespace."},
            "generateName": {"type": "string", "description": "GenerateName is an optional prefix, used by the server, to generate a unique name ONLY IF the Name field has not been provided."},
            "namespace": {"type": "string", "description": "Namespace defines the space within which each name must be unique."},
            "uid": {"type": "string", "description": "UID is the unique in time and space value for this object."},
            "resourceVersion": {"type": "string", "description": "An opaque value that represents the internal version of this object."},
            "generation": {"type": "integer", "format": "int64", "description": "A sequence number representing a specific generation of the desired state."},
            "creationTimestamp": {"type": "string", "format": "date-time", "description": "CreationTimestamp is a timestamp representing the server time when this object was created."},
            "deletionTimestamp": {"type": "string", "format": "date-time", "description": "DeletionTimestamp is RFC 3339 date and time at which this resource will be deleted."},
            "deletionGracePeriodSeconds": {"type": "integer", "format": "int64"},
            "labels": {"type": "object", "additionalProperties": {"type": "string", "default": ""}, "description": "Map of string keys and values that can be used to organize and categorize (scope and select) objects."},
            "annotations": {"type": "object", "additionalProperties": {"type": "string", "default": ""}, "description": "Annotations is an unstructured key value map stored with a resource."},
            "finalizers": {"type": "array", "items": {"type": "string", "default": ""}, "description": "Must be empty before the object is deleted from the registry."},
            "ownerReferences": {"type": "array", "items": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}, "description": "List of objects depended by this object."},
            "managedFields": {"type": "array", "items": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}, "description": "ManagedFields maps workflow-id and version to the set of fields that are managed by that workflow."},
            "selfLink": {"type": "string"}
        }
    })
}

fn kind_schema(def: &ResDef) -> Value {
    let mut s = match (&def.schema, def.crd) {
        (Some(s), true) if s.is_object() => s.clone(),
        _ => {
            json!({"type": "object", "description": format!("{} (schema not modelled by the emulator; unknown fields are kept).", def.kind), "x-kubernetes-preserve-unknown-fields": true})
        }
    };
    let props = s
        .as_object_mut()
        .expect("object")
        .entry("properties")
        .or_insert_with(|| json!({}));
    props["apiVersion"] = json!({"type": "string", "description": "APIVersion defines the versioned schema of this representation of an object."});
    props["kind"] = json!({"type": "string", "description": "Kind is a string value representing the REST resource this object represents."});
    props["metadata"] = json!({"allOf": [{"$ref": format!("#/components/schemas/{OBJECT_META}")}], "default": {},
        "description": "Standard object's metadata."});
    s["type"] = json!("object");
    s["x-kubernetes-group-version-kind"] = json!([gvk(def, &def.kind)]);
    s
}

fn op(def: &ResDef, action: &str, params: &[&str]) -> Value {
    let parameters: Vec<Value> =
        params.iter().map(|p| json!({"name": p, "in": "query", "schema": {"type": "string", "uniqueItems": true}})).collect();
    json!({
        "operationId": format!("{action}{}", def.kind),
        "x-kubernetes-action": action,
        "x-kubernetes-group-version-kind": gvk(def, &def.kind),
        "parameters": parameters,
        "responses": {"200": {"description": "OK", "content": {"application/json": {"schema": {"$ref": format!("#/components/schemas/{}.{}", prefix(&def.group, &def.version), def.kind)}}}}}
    })
}

/// The OpenAPI document for one group-version (`api/v1`, `apis/g/v`).
pub fn document(st: &State, gv_path: &str) -> Option<Value> {
    let (group, version) = match gv_path.strip_prefix("api/") {
        Some(v) => (String::new(), v.to_string()),
        None => {
            let rest = gv_path.strip_prefix("apis/")?;
            let (g, v) = rest.rsplit_once('/')?;
            (g.to_string(), v.to_string())
        }
    };
    let defs: Vec<&std::sync::Arc<ResDef>> = st
        .all_defs()
        .filter(|d| d.group == group && d.version == version)
        .collect();
    if defs.is_empty() {
        return None;
    }
    let mut schemas = Map::new();
    let mut paths = Map::new();
    schemas.insert(OBJECT_META.into(), object_meta());
    schemas.insert(LIST_META.into(), json!({"type": "object", "properties": {"resourceVersion": {"type": "string"}, "continue": {"type": "string"}, "remainingItemCount": {"type": "integer", "format": "int64"}}}));
    for def in defs {
        let p = prefix(&def.group, &def.version);
        schemas.insert(format!("{p}.{}", def.kind), kind_schema(def));
        schemas.insert(
            format!("{p}.{}", def.list_kind()),
            json!({"type": "object", "description": format!("{} is a list of {}", def.list_kind(), def.kind),
                "required": ["items"],
                "properties": {"apiVersion": {"type": "string"}, "kind": {"type": "string"},
                    "items": {"type": "array", "items": {"$ref": format!("#/components/schemas/{p}.{}", def.kind)}},
                    "metadata": {"allOf": [{"$ref": format!("#/components/schemas/{LIST_META}")}], "default": {}}},
                "x-kubernetes-group-version-kind": [gvk(def, &def.list_kind())]}),
        );
        let base = if def.group.is_empty() {
            format!("/api/{}", def.version)
        } else {
            format!("/apis/{}/{}", def.group, def.version)
        };
        let coll = if def.namespaced {
            format!("{base}/namespaces/{{namespace}}/{}", def.plural)
        } else {
            format!("{base}/{}", def.plural)
        };
        let write = ["dryRun", "fieldManager", "fieldValidation"];
        paths.insert(coll.clone(), json!({"get": op(def, "list", &["labelSelector", "fieldSelector", "limit", "continue", "watch"]), "post": op(def, "post", &write)}));
        let mut item = json!({"get": op(def, "get", &[]), "put": op(def, "put", &write),
            "patch": op(def, "patch", &["dryRun", "fieldManager", "fieldValidation", "force"]), "delete": op(def, "delete", &["dryRun", "propagationPolicy"])});
        if def.view == View::EventsV1 {
            item["get"]["x-kubernetes-group-version-kind"] = gvk(def, "Event");
        }
        paths.insert(format!("{coll}/{{name}}"), item);
        if def.status_sub {
            paths.insert(format!("{coll}/{{name}}/status"), json!({"get": op(def, "get", &[]), "put": op(def, "put", &write), "patch": op(def, "patch", &["fieldManager", "fieldValidation", "force"])}));
        }
    }
    Some(json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": "v1.32.0"},
        "paths": paths,
        "components": {"schemas": schemas}
    }))
}

/// The `/openapi/v3` index.
pub fn index(st: &State) -> Value {
    let mut gvs: Vec<String> = st
        .all_defs()
        .map(|d| {
            if d.group.is_empty() {
                format!("api/{}", d.version)
            } else {
                format!("apis/{}/{}", d.group, d.version)
            }
        })
        .collect();
    gvs.sort();
    gvs.dedup();
    let mut paths = Map::new();
    for gv in gvs {
        let doc = document(st, &gv).unwrap_or_default();
        let mut h = std::collections::hash_map::DefaultHasher::new();
        doc.to_string().hash(&mut h);
        paths.insert(
            gv.clone(),
            json!({"serverRelativeURL": format!("/openapi/v3/{gv}?hash={:016X}", h.finish())}),
        );
    }
    json!({"paths": paths})
}
