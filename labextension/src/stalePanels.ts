/**
 * Run-settings panels (the ipywidgets of `%%distcomp NAME`) whose kernel restarted: they
 * still show the old ranks and their buttons reach no kernel. Each is greyed out, its
 * controls disabled, under a note that says why and what to do; the status line of its
 * last action ("submit failed: ...") is cleared, as it tells of a kernel that is gone.
 */

export const STALE_NOTE =
  'The kernel restarted: this panel no longer reaches it and its ranks are gone. ' +
  'Re-run the cell above to get a live panel.';

/** Mark every live panel under `root` as stale; the number marked. */
export function markStalePanels(root: HTMLElement): number {
  let marked = 0;
  root
    .querySelectorAll<HTMLElement>('.distcomp-panel:not(.distcomp-stale-panel)')
    .forEach(panel => {
      panel.classList.add('distcomp-stale-panel');
      panel
        .querySelectorAll<HTMLButtonElement | HTMLInputElement>('button, input')
        .forEach(control => (control.disabled = true));
      panel
        .querySelectorAll<HTMLElement>('.distcomp-status')
        .forEach(status => status.replaceChildren());
      const note = document.createElement('div');
      note.className = 'distcomp-stale-note';
      note.textContent = STALE_NOTE;
      panel.parentElement?.insertBefore(note, panel);
      marked++;
    });
  return marked;
}
