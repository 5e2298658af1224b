const box = document.getElementById('filter');
box.addEventListener('input', () => {
  const words = box.value.toLowerCase().split(/\s+/).filter(Boolean);
  for (const row of document.querySelectorAll('tr[data-name]')) {
    const name = row.dataset.name.toLowerCase();
    row.hidden = !words.every(word => name.includes(word));
  }
});
