/* Reading a hook library's dynamic symbols from the file, without loading it.
 *
 * The nginx master (usually root) checks hook specs at `nginx -t` and on every reload. Loading
 * a library runs its constructors, so the master only reads it: the ELF header (class,
 * byte order, machine, a shared object), the dynamic symbol table, and the bytes of one
 * symbol (srt_hook_abi_version). Only the unprivileged scheduler process dlopens it. Error
 * texts follow the dynamic loader's, so `nginx -t` reads the same either way. */
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "hooks/hooks_internal.h"

#if UINTPTR_MAX == 0xffffffffffffffffu
#define ELF_CLASS ELFCLASS64
typedef Elf64_Ehdr ehdr_t;
typedef Elf64_Shdr shdr_t;
typedef Elf64_Sym  sym_t;
#define SYM_BIND ELF64_ST_BIND
#define SYM_VIS  ELF64_ST_VISIBILITY
#else
#define ELF_CLASS ELFCLASS32
typedef Elf32_Ehdr ehdr_t;
typedef Elf32_Shdr shdr_t;
typedef Elf32_Sym  sym_t;
#define SYM_BIND ELF32_ST_BIND
#define SYM_VIS  ELF32_ST_VISIBILITY
#endif

#if defined(__x86_64__)
#define ELF_MACHINE EM_X86_64
#elif defined(__aarch64__)
#define ELF_MACHINE EM_AARCH64
#elif defined(__i386__)
#define ELF_MACHINE EM_386
#else
#define ELF_MACHINE EM_NONE   /* not checked */
#endif

struct srt_elf {
    const unsigned char *base;
    size_t               size;
    const shdr_t        *sh;
    size_t               n_sh;
    const sym_t         *syms;
    size_t               n_syms;
    const char          *str;
    size_t               str_size;
};

static int why_set(char *why, size_t cap, const char *path, const char *what)
{
    snprintf(why, cap, "%s: %s", path, what);
    return SRT_ERROR;
}

/* A section's bytes lie inside the file (NOBITS sections have none). */
static int section_ok(const srt_elf *e, const shdr_t *s)
{
    return s->sh_type == SHT_NOBITS
           || (s->sh_offset <= e->size && s->sh_size <= e->size - s->sh_offset);
}

int srt_elf_open(const char *path, srt_elf **out, char *why, size_t why_cap)
{
    struct stat st;
    srt_elf *e;
    int fd;

    *out = NULL;
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        snprintf(why, why_cap, "%s: cannot open shared object file: %s", path, strerror(errno));
        return SRT_ERROR;
    }
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return why_set(why, why_cap, path, "cannot read file data: Is a directory or not a file");
    }
    if ((size_t)st.st_size < sizeof(ehdr_t)) {
        close(fd);
        return why_set(why, why_cap, path, "file too short");
    }
    e = calloc(1, sizeof *e);
    if (e == NULL) {
        close(fd);
        return why_set(why, why_cap, path, "out of memory");
    }
    e->size = (size_t)st.st_size;
    e->base = mmap(NULL, e->size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (e->base == MAP_FAILED) {
        free(e);
        return why_set(why, why_cap, path, "cannot map file data");
    }
    *out = e;

    const ehdr_t *h = (const ehdr_t *)e->base;
    if (memcmp(h->e_ident, ELFMAG, SELFMAG) != 0)
        return why_set(why, why_cap, path, "invalid ELF header");
    if (h->e_ident[EI_CLASS] != ELF_CLASS)
        return why_set(why, why_cap, path, ELF_CLASS == ELFCLASS64 ? "wrong ELF class: ELFCLASS32"
                                                                   : "wrong ELF class: ELFCLASS64");
    if (h->e_ident[EI_DATA] != (__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__ ? ELFDATA2LSB : ELFDATA2MSB))
        return why_set(why, why_cap, path, "ELF file data encoding not little-endian");
    if (h->e_type != ET_DYN)
        return why_set(why, why_cap, path, "only ET_DYN and ET_EXEC can be loaded");
    if (ELF_MACHINE != EM_NONE && h->e_machine != ELF_MACHINE)
        return why_set(why, why_cap, path, "wrong ELF machine for this host");
    if (h->e_shentsize != sizeof(shdr_t) || h->e_shoff > e->size
        || (size_t)h->e_shnum > (e->size - h->e_shoff) / sizeof(shdr_t))
        return why_set(why, why_cap, path, "ELF section headers out of the file");
    e->sh = (const shdr_t *)(e->base + h->e_shoff);
    e->n_sh = h->e_shnum;
    for (size_t i = 0; i < e->n_sh; i++) {
        const shdr_t *s = &e->sh[i], *l;
        if (s->sh_type != SHT_DYNSYM)
            continue;
        if (!section_ok(e, s) || s->sh_link >= e->n_sh || s->sh_entsize != sizeof(sym_t))
            break;
        l = &e->sh[s->sh_link];
        if (l->sh_type != SHT_STRTAB || !section_ok(e, l) || l->sh_size == 0)
            break;
        e->syms = (const sym_t *)(e->base + s->sh_offset);
        e->n_syms = s->sh_size / sizeof(sym_t);
        e->str = (const char *)(e->base + l->sh_offset);
        e->str_size = l->sh_size;
        return SRT_OK;
    }
    return why_set(why, why_cap, path, "no readable dynamic symbol table");
}

void srt_elf_close(srt_elf *e)
{
    if (e == NULL)
        return;
    if (e->base && e->base != MAP_FAILED)
        munmap((void *)e->base, e->size);
    free(e);
}

/* 1 when the library defines and exports name (what dlsym would find in it); *data then
 * points at its bytes in the file (NULL for a zero-filled symbol) and *size is st_size. */
int srt_elf_symbol(const srt_elf *e, const char *name, const void **data, size_t *size)
{
    size_t nlen = strlen(name);
    for (size_t i = 1; i < e->n_syms; i++) {
        const sym_t *s = &e->syms[i];
        int bind = SYM_BIND(s->st_info), vis = SYM_VIS(s->st_other);
        if (s->st_name >= e->str_size || e->str_size - s->st_name <= nlen
            || memcmp(e->str + s->st_name, name, nlen + 1) != 0)
            continue;
        if (s->st_shndx == SHN_UNDEF || (bind != STB_GLOBAL && bind != STB_WEAK && bind != STB_GNU_UNIQUE)
            || (vis != STV_DEFAULT && vis != STV_PROTECTED))
            continue;
        *data = NULL;
        *size = s->st_size;
        if (s->st_shndx < e->n_sh) {
            const shdr_t *sec = &e->sh[s->st_shndx];
            if (sec->sh_type != SHT_NOBITS && section_ok(e, sec) && s->st_value >= sec->sh_addr
                && s->st_value - sec->sh_addr <= sec->sh_size
                && s->st_size <= sec->sh_size - (s->st_value - sec->sh_addr))
                *data = e->base + sec->sh_offset + (s->st_value - sec->sh_addr);
        }
        return 1;
    }
    return 0;
}
