/**
 * The JSON Schema of a component spec: the very file the Python package validates with
 * (jupyter_distcomp/core/spec_parsing/component.schema.json), bundled at build time by the
 * builder, so the editor and the kernel can never disagree about what a valid spec is.
 */
import componentSchema from '../../jupyter_distcomp/core/spec_parsing/component.schema.json';

export type JSONSchema = Record<string, unknown>;

export const COMPONENT_SCHEMA: JSONSchema = componentSchema;
