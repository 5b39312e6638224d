// family: the table of model families (family.h), and look-ups over it.
#include "family.h"

#include <stdio.h>
#include <string.h>

// Each family's file defines its descriptor; a new family is a line here and one in the table.
extern const ModelFamily family_llama, family_mingpt, family_neox, family_mixtral;

// the first is the family of the default model
static const ModelFamily *const family_table[] = {&family_llama, &family_mingpt, &family_neox, &family_mixtral};

size_t family_count(void) { return sizeof family_table / sizeof family_table[0]; }

const ModelFamily *family_at(size_t i) { return i < family_count() ? family_table[i] : NULL; }

const ModelFamily *family_find(const char *model_type) {
    for (size_t i = 0; i < family_count(); i++)
        if (!strcmp(family_table[i]->model_type, model_type)) return family_table[i];
    return NULL;
}

const char *family_names(const char *sep, int rope_only) {
    static char names[256];
    size_t n = 0;
    names[0] = 0;
    for (size_t i = 0; i < family_count() && n < sizeof names; i++)
        if (!rope_only || family_table[i]->rope)
            n += (size_t)snprintf(names + n, sizeof names - n, "%s%s", n ? sep : "", family_table[i]->model_type);
    return names;
}

const FamilyPreset *family_preset(const char *name, const ModelFamily **family) {
    for (size_t i = 0; i < family_count(); i++)
        for (const FamilyPreset *p = family_table[i]->presets; p && p->name; p++)
            if (!strcmp(p->name, name)) return *family = family_table[i], p;
    return NULL;
}

const char *family_preset_names(void) {
    static char names[512];
    size_t n = 0;
    names[0] = 0;
    for (size_t i = 0; i < family_count(); i++)
        for (const FamilyPreset *p = family_table[i]->presets; p && p->name && n < sizeof names; p++)
            n += (size_t)snprintf(names + n, sizeof names - n, "%s%s", n ? ", " : "", p->name);
    return names;
}
