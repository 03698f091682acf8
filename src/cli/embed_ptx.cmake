# Wraps a PTX file into a C++ source defining `const char <SYMBOL>[]`.
file(READ ${PTX} content)
file(WRITE ${OUT} "// Generated from ${PTX}; do not edit.\nextern const char ${SYMBOL}[];\nconst char ${SYMBOL}[] = R\"gsptx(${content})gsptx\";\n")
