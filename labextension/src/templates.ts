/**
 * `%%distcomp` starter cells, one per launcher type, for the command palette. The cells live
 * in templates/components.json, which tests/test_labextension_templates.py loads with the
 * kernel's own load_component, so every template is a spec the kernel accepts as is.
 */
import components from '../templates/components.json';

export interface ISpecTemplate {
  launcher: string;
  label: string;
  lines: string[];
}

export const TEMPLATES: ISpecTemplate[] =
  components as unknown as ISpecTemplate[];

export function templateSource(template: ISpecTemplate): string {
  return template.lines.join('\n');
}
