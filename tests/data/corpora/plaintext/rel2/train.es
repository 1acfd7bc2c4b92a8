Otra versión.
Otra frase.
