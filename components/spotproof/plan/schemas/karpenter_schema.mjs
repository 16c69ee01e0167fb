// Validate Karpenter objects against the schemas @kubernetes-models/karpenter publishes.
//
// usage: node karpenter_schema.mjs <path of @kubernetes-models/karpenter | bundle .mjs>
// stdin: a JSON array of objects; stdout: a JSON array with one list of errors per object.
// The bundle is what scripts/bundle_karpenter_schemas.sh builds into a wheel: the same
// validators, exported by kind.
//
// The package's validators check types, enums, patterns, ranges and required fields, but
// accept unknown fields. Each object is therefore handed to its validator behind a Proxy
// that records which keys the validator reads: a key it never reads in an object it never
// enumerates (as it does for maps like labels and limits) is not in the schema.
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

const SCHEMAS = {
  "karpenter.sh/v1/NodePool": "IoK8sSigsKarpenterPkgApisV1NodePool",
  "karpenter.k8s.aws/v1/EC2NodeClass": "ComGithubAwsKarpenterProviderAwsPkgApisV1EC2NodeClass",
};

const source = process.argv[2];
const objects = JSON.parse(readFileSync(0, "utf8"));
const bundle = source.endsWith(".mjs") ? await import(pathToFileURL(source).href) : null;

async function validatorFor(obj) {
  const schema = SCHEMAS[`${obj.apiVersion}/${obj.kind}`];
  if (!schema) return null;
  if (bundle) return bundle[obj.kind];
  const url = pathToFileURL(join(source, "_schemas", `${schema}.js`)).href;
  return (await import(url)).validate;
}

// The package's validators are compiled without messages; say what each keyword means.
function describe({ keyword, params }) {
  switch (keyword) {
    case "enum":
      return `must be one of ${params.allowedValues.join(", ")}`;
    case "pattern":
      return `must match pattern ${params.pattern}`;
    case "required":
      return `missing required field ${params.missingProperty}`;
    case "type":
      return `must be of type ${params.type}`;
    case "minimum":
    case "maximum":
      return `must be ${params.comparison} ${params.limit}`;
    case "minItems":
    case "maxItems":
    case "minLength":
    case "maxLength":
      return `${keyword} is ${params.limit}`;
    default:
      return `${keyword} ${JSON.stringify(params)}`;
  }
}

function unknownFields(obj, validate) {
  const read = new Map();
  const enumerated = new Set();
  const watch = (value, path) => {
    if (value === null || typeof value !== "object") return value;
    if (!read.has(path)) read.set(path, new Set());
    return new Proxy(value, {
      get(target, key) {
        if (typeof key === "string") read.get(path).add(key);
        return watch(target[key], `${path}/${String(key)}`);
      },
      ownKeys(target) {
        enumerated.add(path);
        return Reflect.ownKeys(target);
      },
    });
  };
  validate(watch(obj, ""));
  const errors = (validate.errors || []).map((e) => `${e.instancePath || "/"}: ${describe(e)}`);
  const visit = (value, path) => {
    if (value === null || typeof value !== "object") return;
    for (const key of Object.keys(value)) {
      const child = `${path}/${key}`;
      const known = Array.isArray(value) || enumerated.has(path) || read.get(path)?.has(key);
      if (known) visit(value[key], child);
      else errors.push(`${child}: unknown field`);
    }
  };
  visit(obj, "");
  return errors;
}

const results = [];
for (const obj of objects) {
  const validate = await validatorFor(obj);
  results.push(
    validate ? unknownFields(obj, validate) : [`no Karpenter schema for ${obj.apiVersion} ${obj.kind}`],
  );
}
process.stdout.write(JSON.stringify(results));
