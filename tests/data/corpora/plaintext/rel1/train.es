Primera versión.
Segunda frase.
