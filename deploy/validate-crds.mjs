// Validates ServiceMonitor and PrometheusRule manifests (YAML files named on
// the command line) against the prometheus-operator's schemas as
// @kubernetes-models/prometheus-operator ships them (its models' validate()
// throws, naming the path, on a violation). MODULES: the node_modules
// folder deploy/tools.sh installed them into.
import { createRequire } from "node:module";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

const modules = process.env.MODULES;
const yaml = createRequire(join(modules, "x.js"))("js-yaml");
const v1 = join(modules, "@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1");
const load = async (kind) => (await import(pathToFileURL(join(v1, `${kind}.js`)).href))[kind];
const models = {
  ServiceMonitor: await load("ServiceMonitor"),
  PrometheusRule: await load("PrometheusRule"),
};
let n = 0;
for (const f of process.argv.slice(2)) {
  const doc = yaml.load(readFileSync(f, "utf8"));
  const Model = models[doc.kind];
  if (!Model) throw new Error(`${f}: no schema for kind ${doc.kind}`);
  new Model(doc).validate();
  n++;
}
if (n === 0) throw new Error("no manifest given");
console.log(`${n} manifests valid (${Object.keys(models).join(", ")})`);
