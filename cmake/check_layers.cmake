# The layers of src/ and what each may include: a folder's sources may include headers of the
# folders its layer depends on (directly or through another layer) and of its own folder, nothing
# above it. An include that breaks this fails the configure step with one line per offending
# file, so an upward include cannot land (docs/architecture.md, "Layers").
#
#   include(cmake/check_layers.cmake)            then  minfer_check_layers(<src dir>)
#   cmake -DMINFER_LAYERS_SRC=<src dir> -P cmake/check_layers.cmake   (the same check as a script)
#
# Each entry: "layer:direct dependencies" (comma-separated). A folder under src/ that is not
# listed is an error too, so a new layer must be placed in the table.
if(CMAKE_SCRIPT_MODE_FILE)
  cmake_minimum_required(VERSION 3.20)  # script mode: today's policies (IN_LIST, empty list items)
endif()
set(MINFER_LAYER_TABLE
  "core:"
  "quant:core"
  "gguf:core,quant"
  "tokenizer:gguf"
  "chat:tokenizer"
  "sampling:core"
  "graph:quant"
  "kv:graph"
  "cpu:graph"
  "cuda:graph"
  "models:gguf,graph,tokenizer"
  "convert:models"
  "engine:cpu,cuda,kv,models,sampling"
  "server:chat,engine")

# Sets <out> to the layers `layer` may include: itself and the transitive closure of its
# dependencies in MINFER_LAYER_TABLE.
function(minfer_layer_closure layer out)
  set(todo ${layer})
  set(seen "")
  while(todo)
    list(POP_FRONT todo cur)
    if(cur IN_LIST seen)
      continue()
    endif()
    list(APPEND seen ${cur})
    foreach(entry IN LISTS MINFER_LAYER_TABLE)
      string(REPLACE ":" ";" parts "${entry}")
      list(GET parts 0 name)
      if(name STREQUAL cur)
        list(LENGTH parts n)
        if(n GREATER 1)
          list(GET parts 1 deps)
          string(REPLACE "," ";" deps "${deps}")
          list(APPEND todo ${deps})
        endif()
      endif()
    endforeach()
  endwhile()
  set(${out} ${seen} PARENT_SCOPE)
endfunction()

function(minfer_check_layers src)
  set(known "")
  foreach(entry IN LISTS MINFER_LAYER_TABLE)
    string(REPLACE ":" ";" parts "${entry}")
    list(GET parts 0 name)
    list(APPEND known ${name})
  endforeach()
  file(GLOB dirs LIST_DIRECTORIES true RELATIVE ${src} ${src}/*)
  set(problems "")
  foreach(layer IN LISTS dirs)
    if(NOT IS_DIRECTORY ${src}/${layer})
      continue()
    endif()
    if(NOT layer IN_LIST known)
      list(APPEND problems "src/${layer}/ is not in cmake/check_layers.cmake's layer table")
      continue()
    endif()
    minfer_layer_closure(${layer} allowed)
    file(GLOB_RECURSE files ${src}/${layer}/*.h ${src}/${layer}/*.cpp ${src}/${layer}/*.cu ${src}/${layer}/*.cuh)
    foreach(f IN LISTS files)
      file(STRINGS ${f} lines REGEX "^[ \t]*#[ \t]*include[ \t]*\"[a-z_0-9]+/")
      foreach(line IN LISTS lines)
        string(REGEX MATCH "\"([a-z_0-9]+)/" m "${line}")
        set(target ${CMAKE_MATCH_1})
        if(NOT target IN_LIST known)
          continue()  # not a layer folder (e.g. a relative path inside the layer)
        endif()
        if(NOT target IN_LIST allowed)
          file(RELATIVE_PATH rel ${src}/.. ${f})
          string(STRIP "${line}" inc)
          string(REPLACE ";" "," allowed_text "${allowed}")
          list(APPEND problems "${rel}: ${inc}: layer '${layer}' may include only ${allowed_text}")
        endif()
      endforeach()
    endforeach()
  endforeach()
  if(problems)
    list(JOIN problems "\n  " text)
    message(FATAL_ERROR "minfer: an include crosses the layers of src/ upward:\n  ${text}")
  endif()
endfunction()

if(CMAKE_SCRIPT_MODE_FILE AND DEFINED MINFER_LAYERS_SRC)
  minfer_check_layers(${MINFER_LAYERS_SRC})
endif()
