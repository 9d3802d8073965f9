//! Scenarios driven by a kube-rs 5 client (and raw HTTP where kube-rs hides the details), one
//! module per concern; the helpers they share are here.

use crate::common::*;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{ConfigMap, Event as CoreEvent, Namespace, Secret};
use keeper_e2e_apiserver::Config;
use kube::api::{
    Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams, WatchEvent,
    WatchParams,
};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use serde_json::{Value, json};
use std::time::Duration;

mod deletion;
mod errors;
mod objects;
mod views;
mod watches;
mod writes;

fn api_err(e: kube::Error) -> Box<kube::core::Status> {
    match e {
        kube::Error::Api(s) => s,
        other => panic!("expected an API error, got {other:?}"),
    }
}

fn cm(name: &str, labels: Value) -> ConfigMap {
    serde_json::from_value(
        json!({"metadata": {"name": name, "labels": labels}, "data": {"k": "v"}}),
    )
    .expect("cm")
}

fn bucket(name: &str, spec: Value) -> DynamicObject {
    DynamicObject::new(name, &s3_api_resource()).data(json!({ "spec": spec }))
}
